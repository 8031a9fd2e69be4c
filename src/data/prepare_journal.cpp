// The journal of a resumable `data prepare` (prepare_journal.h).
#include "prepare_journal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "json.h"
#include "shard.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/output_files.h"
#include "whole_file.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

constexpr const char* kJournalFormat = "trainrun prepare journal";
const char* const kShards[] = {"train.bin", "val.bin"};

std::string eot_text(int64_t eot) {
  return eot < 0 ? "none" : std::to_string(eot);
}

Json fingerprint_json(const PrepareFingerprint& fp) {
  Json inputs = Json::array();
  for (const auto& in : fp.inputs)
    inputs.push_back({{"path", in.path}, {"bytes", in.bytes}, {"mtime_ns", in.mtime_ns}});
  return {{"inputs", std::move(inputs)},
          {"tokenizer", fp.tokenizer},
          {"tokenizer_path", fp.tokenizer_path},
          {"val_fraction", fp.val_fraction},
          {"eot", fp.eot},
          {"vocab_size", fp.vocab_size},
          {"dtype", fp.dtype},
          {"block_bytes", fp.block_bytes}};
}

PrepareFingerprint fingerprint_from(const Json& j) {
  PrepareFingerprint fp;
  for (const Json& in : j.at("inputs"))
    fp.inputs.push_back({in.at("path").get<std::string>(), in.at("bytes").get<uint64_t>(),
                         in.at("mtime_ns").get<int64_t>()});
  fp.tokenizer = j.at("tokenizer").get<std::string>();
  fp.tokenizer_path = j.at("tokenizer_path").get<std::string>();
  fp.val_fraction = j.at("val_fraction").get<double>();
  fp.eot = j.at("eot").get<int64_t>();
  fp.vocab_size = j.at("vocab_size").get<int>();
  fp.dtype = j.at("dtype").get<int>();
  fp.block_bytes = j.at("block_bytes").get<uint64_t>();
  return fp;
}

Json position_json(const PreparePosition& p) {
  Json done = Json::array();
  for (const ManifestInput& m : p.done)
    done.push_back({{"path", m.path}, {"bytes", m.bytes}, {"tokens", m.tokens}});
  return {{"inputs_done", p.inputs_done},
          {"started", p.started},
          {"offset", p.offset},
          {"read_end", p.read_end},
          {"input_tokens", p.input_tokens},
          {"train_tokens", p.train_tokens},
          {"val_tokens", p.val_tokens},
          {"finished", p.finished},
          {"done", std::move(done)}};
}

PreparePosition position_from(const Json& j) {
  PreparePosition p;
  p.inputs_done = j.at("inputs_done").get<size_t>();
  p.started = j.at("started").get<bool>();
  p.offset = j.at("offset").get<uint64_t>();
  p.read_end = j.at("read_end").get<uint64_t>();
  p.input_tokens = j.at("input_tokens").get<uint64_t>();
  p.train_tokens = j.at("train_tokens").get<uint64_t>();
  p.val_tokens = j.at("val_tokens").get<uint64_t>();
  p.finished = j.at("finished").get<bool>();
  for (const Json& m : j.at("done"))
    p.done.push_back({m.at("path").get<std::string>(), m.at("bytes").get<uint64_t>(),
                      m.at("tokens").get<uint64_t>()});
  return p;
}

struct Journal {
  PrepareFingerprint fp;
  PreparePosition pos;
  bool force = false;
};

// The journal at path; nullopt when there is none; ConfigError (with the fix) when it cannot be
// read.
std::optional<Journal> read_journal(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  const std::string text = read_whole_file(path);
  try {
    const Json j = parse_json(text, path);
    if (!j.is_object() || j.value("format", "") != kJournalFormat || j.value("version", 0) != 1)
      throw DataError("not a trainrun prepare journal");
    return Journal{fingerprint_from(j.at("fingerprint")), position_from(j.at("position")),
                   j.value("force", false)};
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format(
        "data prepare: {} cannot be read ({}), so the interrupted prepare it records cannot be "
        "continued; pass --force to start over",
        path, e.what()));
  }
}

// Each way `now` differs from `was`, in words.
std::vector<std::string> differences(const PrepareFingerprint& was, const PrepareFingerprint& now) {
  std::vector<std::string> d;
  if (was.tokenizer != now.tokenizer) {
    if (was.tokenizer == "bytes")
      d.push_back(fmt::format("it was byte-level, now --tokenizer {}", now.tokenizer_path));
    else if (now.tokenizer == "bytes")
      d.push_back(fmt::format("it used --tokenizer {}, now none (byte-level)", was.tokenizer_path));
    else
      d.push_back(fmt::format("the tokenizer changed: {} had sha256 {:.12}, {} has {:.12}",
                              was.tokenizer_path, was.tokenizer, now.tokenizer_path,
                              now.tokenizer));
  } else if (was.vocab_size != now.vocab_size || was.dtype != now.dtype) {
    d.push_back(
        fmt::format("the vocabulary changed ({} ids, now {})", was.vocab_size, now.vocab_size));
  }
  if (was.val_fraction != now.val_fraction)
    d.push_back(fmt::format("--val-fraction was {}, now {}", was.val_fraction, now.val_fraction));
  if (was.eot != now.eot)
    d.push_back(fmt::format("the end-of-text id (--eot) was {}, now {}", eot_text(was.eot),
                            eot_text(now.eot)));
  if (was.block_bytes != now.block_bytes)
    d.push_back(
        fmt::format("the block size was {} bytes, now {}", was.block_bytes, now.block_bytes));

  std::map<std::string, const PrepareFingerprint::Input*> before;
  for (const auto& in : was.inputs) before.emplace(in.path, &in);
  std::map<std::string, const PrepareFingerprint::Input*> after;
  for (const auto& in : now.inputs) after.emplace(in.path, &in);
  std::vector<std::string> inputs;
  for (const auto& in : was.inputs)
    if (!after.count(in.path)) inputs.push_back(fmt::format("{} is no longer an input", in.path));
  for (const auto& in : now.inputs) {
    const auto it = before.find(in.path);
    if (it == before.end())
      inputs.push_back(fmt::format("{} is a new input", in.path));
    else if (it->second->bytes != in.bytes)
      inputs.push_back(
          fmt::format("{} changed size ({} bytes, now {})", in.path, it->second->bytes, in.bytes));
    else if (it->second->mtime_ns != in.mtime_ns)
      inputs.push_back(fmt::format("{} was modified (its mtime changed)", in.path));
  }
  if (inputs.empty() && was.inputs.size() == now.inputs.size())
    for (size_t i = 0; i < now.inputs.size(); ++i)
      if (was.inputs[i].path != now.inputs[i].path) {
        inputs.push_back(fmt::format("the inputs are in another order (input {} was {}, now {})",
                                     i + 1, was.inputs[i].path, now.inputs[i].path));
        break;
      }
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < inputs.size() && i < kShown; ++i) d.push_back(inputs[i]);
  if (inputs.size() > kShown)
    d.push_back(fmt::format("and {} more input changes", inputs.size() - kShown));
  return d;
}

bool is_trainrun_partial(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[8] = {};
  const size_t n = std::fread(magic, 1, sizeof magic, f);
  std::fclose(f);
  // Shorter than a magic: created and killed before its header reached the disk.
  return n < sizeof magic || std::memcmp(magic, kShardMagic, sizeof magic) == 0;
}

void fsync_dir(int fd) {
  if (fd >= 0) ::fsync(fd);
}

}  // namespace

PrepareFingerprint::Input fingerprint_input(const PrepareInput& in) {
  std::error_code ec;
  fs::path p = fs::absolute(in.path, ec);
  if (ec) p = in.path;
  // As the journal stores it: a name that is not UTF-8 has U+FFFD for its stray bytes.
  const auto path = Json::parse(json_literal(p.lexically_normal().string())).get<std::string>();
  return {path, in.bytes, in.mtime_ns};
}

std::string human_bytes(uint64_t n) {
  const auto x = static_cast<double>(n);
  if (n >= 1000000000) return fmt::format("{:.1f} GB", x / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f} MB", x / 1e6);
  if (n >= 1000) return fmt::format("{:.1f} kB", x / 1e3);
  return fmt::format("{} bytes", n);
}

JournalPeek peek_journal(const std::string& dir) {
  const std::string path = (fs::path(dir) / kJournalName).string();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return {};
  try {
    const auto j = read_journal(path);
    return {true, j && (j->force || j->pos.finished)};
  } catch (const Error&) {
    return {true, false};  // the prepare itself says why it cannot continue
  }
}

PrepareJournal::PrepareJournal(const std::string& dir, PrepareFingerprint fp, bool force)
    : dir_(dir), path_((fs::path(dir) / kJournalName).string()), fp_(std::move(fp)) {
  dir_fd_.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_.fd < 0)
    throw DataError(
        fmt::format("cannot open the output directory {} ({})", dir, std::strerror(errno)));
  // Two prepares into one directory would write the same partial shards. (A file system
  // without locks has none: that is not a reason to refuse.)
  if (::flock(dir_fd_.fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    throw ConfigError(fmt::format(
        "data prepare: another `trainrun data prepare` is writing into {}; wait for it to "
        "finish, or choose another --out",
        dir));
  std::optional<Journal> j;
  if (force) {
    std::error_code ec;
    fs::remove(path_, ec);
    for (const char* name : kShards) {
      const std::string partial = (fs::path(dir) / name).string() + kPartialSuffix;
      if (is_trainrun_partial(partial)) fs::remove(partial, ec);
    }
  } else {
    j = read_journal(path_);
  }
  if (!j) {
    replaces_ = force;
    write(start_);  // before any partial shard: a partial without a journal is not ours
    last_ = std::chrono::steady_clock::now();
    return;
  }
  const std::vector<std::string> diff = differences(j->fp, fp_);
  if (!diff.empty()) {
    std::string what;
    for (const std::string& s : diff) what += (what.empty() ? "" : "; ") + s;
    throw ConfigError(fmt::format(
        "data prepare: {} holds an interrupted prepare ({}, {} of {} inputs done) that these "
        "arguments cannot continue: {}. Run it with the original arguments to resume, or pass "
        "--force to start over",
        dir, path_, j->pos.inputs_done, j->fp.inputs.size(), what));
  }
  start_ = j->pos;
  replaces_ = j->force;
  resumed_ = true;
  if (start_.inputs_done > fp_.inputs.size() ||
      (start_.inputs_done == fp_.inputs.size() && start_.started))
    throw ConfigError(
        fmt::format("data prepare: {} records {} inputs done of {}; pass --force to start over",
                    path_, start_.inputs_done, fp_.inputs.size()));
  if (start_.finished) {
    // Stopped while renaming: a shard already renamed goes back to its partial name, so that
    // the rename is done again (it is checked to be the shard the journal records).
    for (int i = 0; i < 2; ++i) {
      const std::string final_path = (fs::path(dir) / kShards[i]).string();
      const std::string partial = final_path + kPartialSuffix;
      std::error_code ec;
      if (fs::exists(partial, ec)) continue;
      const uint64_t want = i == 0 ? start_.train_tokens : start_.val_tokens;
      ShardHeader h{};
      std::FILE* f = std::fopen(final_path.c_str(), "rb");
      const bool ok = f && std::fread(&h, sizeof h, 1, f) == 1 &&
                      std::memcmp(h.magic, kShardMagic, 8) == 0 && h.count == want &&
                      fs::file_size(final_path, ec) == sizeof h + want * h.dtype;
      if (f) std::fclose(f);
      if (!ok || std::rename(final_path.c_str(), partial.c_str()) != 0)
        throw ConfigError(fmt::format(
            "data prepare: {} records a finished prepare, but neither {} nor a {} of {} tokens "
            "is there; pass --force to start over",
            path_, partial, final_path, want));
    }
    fsync_dir(dir_fd_.fd);
  }
  uint64_t done = 0, total = 0;
  for (size_t i = 0; i < fp_.inputs.size(); ++i) {
    total += fp_.inputs[i].bytes;
    if (i < start_.inputs_done) done += fp_.inputs[i].bytes;
  }
  if (start_.started) done += start_.offset;
  std::string next = "finishing";
  if (!start_.finished && start_.inputs_done < fp_.inputs.size())
    next = start_.started ? fmt::format("continuing with {} from byte {}",
                                        fp_.inputs[start_.inputs_done].path, start_.offset)
                          : fmt::format("continuing with {}", fp_.inputs[start_.inputs_done].path);
  std::fprintf(stderr, "resuming: %zu of %zu inputs done (%s of %s), %s\n", start_.inputs_done,
               fp_.inputs.size(), human_bytes(done).c_str(), human_bytes(total).c_str(),
               next.c_str());
  last_ = std::chrono::steady_clock::now();
}

PrepareJournal::Fd::~Fd() {
  if (fd >= 0) ::close(fd);  // and the lock with it
}

bool PrepareJournal::due() const {
  // At most one entry a second (interval_), and less often when writing one is slow (a long
  // input list): the journal costs at most a few percent of the prepare.
  const auto wait = std::max(interval_, cost_ * 20);
  return std::chrono::steady_clock::now() - last_ >= wait;
}

bool PrepareJournal::boundary(size_t inputs_done, bool between_inputs) {
  if (stopping_) stop();
  if (between_inputs && stop_after_ >= 0 && inputs_done == static_cast<uint64_t>(stop_after_)) {
    stopping_ = true;
    return true;
  }
  return due();
}

void PrepareJournal::test_hooks(const PrepareRequest& req) {
  stop_after_ = req.stop_after_inputs;
  stop_kills_ = req.stop_kills;
  // Already there (0: the entry a fresh prepare starts with): stop at the first boundary.
  stopping_ = stop_after_ >= 0 && static_cast<uint64_t>(stop_after_) == start_.inputs_done &&
              !start_.started;
  interval_ = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(req.journal_seconds, 0.0)));
  after_entry_ = req.after_entry;
}

void PrepareJournal::rename_point() {
  if (stopping_) stop();
}

void PrepareJournal::stop() const {
  if (stop_kills_) ::raise(SIGKILL);
  throw PrepareStopped("data prepare: stopped for a test (TRAINRUN_PREPARE_STOP_AFTER)");
}

void PrepareJournal::record(const PreparePosition& pos, ShardWriter& train, ShardWriter& val) {
  const auto t0 = std::chrono::steady_clock::now();
  train.sync();
  val.sync();
  write(pos);
  last_ = std::chrono::steady_clock::now();
  cost_ = interval_.count() > 0 ? last_ - t0 : std::chrono::steady_clock::duration{};
  if (after_entry_) after_entry_();
}

void PrepareJournal::write(const PreparePosition& pos) {
  const Json j = {{"format", kJournalFormat},
                  {"version", 1},
                  {"force", replaces_},
                  {"fingerprint", fingerprint_json(fp_)},
                  {"position", position_json(pos)}};
  const std::string text = j.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
  const std::string tmp = path_ + ".tmp";
  // A new file (a link planted at the temporary's name is never written through), fsync'd, then
  // renamed over the journal: a reader sees the old entry or the new one. A full disk is exit 74.
  write_new_file(tmp, text, /*sync=*/true);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw write_error(path_, err);
  }
  fsync_dir(dir_fd_.fd);
}

void PrepareJournal::remove(bool discard) {
  std::error_code ec;
  fs::remove(path_, ec);
  fs::remove(path_ + ".tmp", ec);  // a write that was killed
  if (discard)
    for (const char* name : kShards)
      fs::remove((fs::path(dir_) / name).string() + kPartialSuffix, ec);
  fsync_dir(dir_fd_.fd);
}

}  // namespace trainrun
