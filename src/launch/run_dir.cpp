// Run directory ownership: recognising trainrun's directories, refusing a second run or a
// user's directory, the lock, and the archive --new makes.
#include "run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <vector>

#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/obs/provenance.h"
#include "trainrun/obs/tb_hparams.h"
#include "trainrun/runtime/host.h"

namespace fs = std::filesystem;

namespace trainrun {
namespace {

// The top-level names trainrun writes in a run directory (man trainrun, FILES). config.yaml
// alone proves nothing: users keep files of that name too.
const std::set<std::string> kOwnNames = {kRunDirLockFile,
                                         "config.yaml",
                                         "checkpoints",
                                         "logs",
                                         "metrics.jsonl",
                                         "metrics.h5",
                                         "tb",
                                         "trace",
                                         "job.sbatch",
                                         "report.png",
                                         "config.submitted.yaml",
                                         "report.html",
                                         kProvenanceFile,
                                         tb::kHParamsEventsFile};  // a sweep's (tb_hparams.h)

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}
bool is_archive(const std::string& name) {
  return starts_with(name, "archive-");
}
bool is_own(const std::string& name) {
  return kOwnNames.count(name) || is_archive(name) ||
         (starts_with(name, "slurm-") && name.size() > 10 &&
          name.compare(name.size() - 4, 4, ".out") == 0);
}

std::string lock_path(const std::string& dir) {
  return (fs::path(dir) / kRunDirLockFile).string();
}

// Why the directory cannot be used, from the errno of the call that failed.
std::string why_unusable(const std::string& dir, int err) {
  switch (err) {
    case ENOTDIR:
    case EEXIST:
      return fmt::format(
          "run directory {}: a part of that path is a file, not a directory; "
          "choose another --run-dir",
          dir);
    case ENAMETOOLONG:
      return fmt::format(
          "run directory {}: a name in that path is longer than the file system "
          "allows (255 bytes): shorten `name` or set run_dir / --run-dir",
          dir);
    case EACCES:
    case EPERM:
    case EROFS:
      return fmt::format("run directory {} is not writable ({}): choose another --run-dir", dir,
                         std::strerror(err));
    default:
      return fmt::format("cannot use run directory {}: {}", dir, std::strerror(err));
  }
}

std::string checkpoint_step_text(const std::string& file) {
  long long step = 0;
  return std::sscanf(fs::path(file).filename().c_str(), "step-%lld.h5", &step) == 1
             ? fmt::format("checkpoints up to step {}", step)
             : std::string("checkpoints");
}

// A few of the names, for a message.
std::string some_names(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 3);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

std::string local_time(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  return std::strftime(buf, sizeof buf, format, &tm) ? std::string(buf) : std::string();
}

std::string read_holder(int fd) {
  char buf[512] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? std::string("another process (it has not said who yet)") : s;
}

[[noreturn]] void throw_in_use(const std::string& dir, const std::string& holder) {
  throw RunDirError(fmt::format(
      "run directory {} is in use by another trainrun: {}; wait for it to end (or stop it), or "
      "choose another --run-dir",
      dir, holder));
}

}  // namespace

RunDirState inspect_run_dir(const std::string& dir) {
  if (dir.empty()) throw RunDirError("the run directory is empty: set run_dir or --run-dir");
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec.value() != ENOENT) throw RunDirError(why_unusable(dir, ec.value()));
  if (!fs::exists(st)) return {RunDirKind::missing, ""};
  if (!fs::is_directory(st))
    throw RunDirError(
        fmt::format("run directory {} is a file, not a directory: choose another --run-dir", dir));
  std::vector<std::string> own, others;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    (is_own(name) ? own : others).push_back(name);
  }
  if (ec) throw RunDirError(why_unusable(dir, ec.value()));
  RunDirState state;
  state.locked_once = std::count(own.begin(), own.end(), kRunDirLockFile) > 0;
  state.others = !others.empty();
  if (own.empty() && others.empty()) {
    state.kind = RunDirKind::empty;
  } else if (const auto ckpts = list_checkpoints(dir); !ckpts.empty()) {
    state = {RunDirKind::run, checkpoint_step_text(ckpts.front()), state.locked_once, state.others,
             true};
  } else if (fs::exists(fs::path(dir) / "metrics.jsonl") ||
             fs::exists(fs::path(dir) / "metrics.h5")) {
    state.kind = RunDirKind::run;
    state.what = "the metrics of a run that wrote no checkpoint";
  } else if (others.empty() && std::any_of(own.begin(), own.end(), [](const std::string& n) {
               return n != "config.yaml";
             })) {
    state.kind = RunDirKind::unused;
    state.what = some_names(own);
  } else {
    state.kind = RunDirKind::foreign;
    state.what = some_names(others.empty() ? own : others);
  }
  return state;
}

void check_run_dir_use(const std::string& dir, const RunDirState& state, RunDirUse use,
                       bool renew) {
  if (use == RunDirUse::resume) return;  // resolve_run found the run's checkpoint there
  if (state.kind == RunDirKind::foreign && !renew)
    throw RunDirError(fmt::format(
        "run directory {} is not empty and trainrun did not make it (it holds {}): choose an "
        "empty or new directory with --run-dir, or add --new to use it anyway (trainrun adds "
        "its own files and deletes nothing)",
        dir, state.what));
  // A run killed before its first checkpoint has nothing to continue from: `CONFIG --resume`
  // starts it again from step 0 (resolve_run).
  if (state.kind == RunDirKind::run && use == RunDirUse::start && !renew && !state.checkpoints)
    throw RunDirError(fmt::format(
        "run directory {} already holds a run that wrote no checkpoint ({}): start it again "
        "from step 0 by adding --resume to this command (the earlier attempt's files move into "
        "{}/archive-TIME/), start over with --new, or choose another --run-dir",
        dir, state.what, dir));
  if (state.kind == RunDirKind::run && use == RunDirUse::start && !renew)
    throw RunDirError(fmt::format(
        "run directory {} already holds a run ({}): continue it with `trainrun --resume {}`, "
        "start over with --new (moves that run's files into {}/archive-TIME/), or choose "
        "another --run-dir",
        dir, state.what, dir, dir));
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // the kernel drops the flock with the last descriptor
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunDirLock RunDirLock::take(const std::string& dir) {
  inspect_run_dir(dir);  // a file in its place, or unreadable: say so, not "cannot create"
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RunDirError(why_unusable(dir, ec.value()));
  RunDirLock lock;
  lock.fd_ = open_no_follow(lock_path(dir), O_RDWR | O_CREAT);
  if (lock.fd_ < 0) throw RunDirError(why_unusable(dir, errno));
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) throw_in_use(dir, read_holder(lock.fd_));
    throw RunDirError(fmt::format("cannot lock run directory {}: {}", dir, std::strerror(err)));
  }
  // The folders trainrun writes into: a link in place of one would take every file written
  // there (rank logs, checkpoints, traces) to wherever it points.
  for (const char* sub : {"checkpoints", "logs", "tb", "trace"})
    refuse_link((fs::path(dir) / sub).string());
  const std::string who = fmt::format("pid {} on {} since {}\n", getpid(), host_name(),
                                      local_time("%Y-%m-%d %H:%M:%S %z"));
  if (::ftruncate(lock.fd_, 0) != 0 ||
      ::pwrite(lock.fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size()))
    throw RunDirError(why_unusable(dir, errno));
  return lock;
}

std::string run_dir_lock_holder(const std::string& dir) {
  const int fd = open_no_follow(lock_path(dir), O_RDONLY | O_NONBLOCK);
  if (fd < 0) return "";
  std::string holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0)
    holder = read_holder(fd);
  else
    ::flock(fd, LOCK_UN);
  ::close(fd);
  return holder;
}

std::string archive_run(const std::string& dir) {
  std::vector<std::string> moving;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_own(name) && name != kRunDirLockFile && !is_archive(name)) moving.push_back(name);
  }
  if (ec) throw RunDirError(why_unusable(dir, ec.value()));
  if (moving.empty()) return "";
  const std::string stamp = local_time("%Y%m%d-%H%M%S");
  fs::path archive = fs::path(dir) / ("archive-" + stamp);
  for (int n = 2; fs::exists(archive); ++n)
    archive = fs::path(dir) / fmt::format("archive-{}-{}", stamp, n);
  fs::create_directory(archive, ec);
  if (ec) throw RunDirError(why_unusable(dir, ec.value()));
  for (const std::string& name : moving) {
    // config.yaml is copied, not moved: it may be the very CONFIG this run was started with
    // (`trainrun RUN_DIR/config.yaml --run-dir RUN_DIR --new`), which the ranks (and restarts)
    // read after this; the new run replaces it with its own.
    if (name == "config.yaml" && !fs::is_symlink(fs::path(dir) / name))
      fs::copy_file(fs::path(dir) / name, archive / name, ec);
    else
      fs::rename(fs::path(dir) / name, archive / name, ec);
    if (ec)
      throw RunDirError(fmt::format("--new: cannot move {} into {}: {}",
                                    (fs::path(dir) / name).string(), archive.string(),
                                    ec.message()));
  }
  return archive.string();
}

void check_not_in_use(const std::string& dir) {
  if (const std::string holder = run_dir_lock_holder(dir); !holder.empty())
    throw_in_use(dir, holder);
}

RunDirLock claim_run_dir(const std::string& dir, RunDirUse use, bool renew) {
  // A run going on here is the first thing to say (not "it holds a run: --resume it").
  check_not_in_use(dir);
  check_run_dir_use(dir, inspect_run_dir(dir), use, renew);  // before writing anything
  RunDirLock lock = RunDirLock::take(dir);
  // Another run may have started here between the look and the lock: look again.
  const RunDirState state = inspect_run_dir(dir);
  check_run_dir_use(dir, state, use, renew);
  // A restart (no checkpoint yet) writes the run's metrics from step 0: an earlier attempt's rows
  // are kept in the archive rather than overwritten.
  const bool restart_over = use == RunDirUse::restart && state.kind == RunDirKind::run;
  if (renew || restart_over) {
    const std::string archive = archive_run(dir);
    if (!archive.empty())
      fmt::print(stderr, "{}: moved the earlier {}'s files in {} into {}\n",
                 renew ? "--new" : "restart", renew ? "run" : "attempt", dir, archive);
  }
  return lock;
}

namespace {

// What RunDirLock::take would meet, without writing: the directory, or the nearest folder above
// it that exists (take creates the rest), must be writable by this user.
void check_writable(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!ec && !fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path())
    p = p.parent_path();
  if (!ec && !fs::is_directory(p, ec)) throw RunDirError(why_unusable(dir, ENOTDIR));
  if (ec) throw RunDirError(why_unusable(dir, ec.value()));
  if (::faccessat(AT_FDCWD, p.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    throw RunDirError(why_unusable(dir, errno));
  // take opens the lock file for writing: one left by another user may be theirs alone.
  if (::faccessat(AT_FDCWD, lock_path(dir).c_str(), R_OK | W_OK, AT_EACCESS) != 0 &&
      errno != ENOENT)
    throw RunDirError(why_unusable(dir, errno));
}

}  // namespace

std::string run_dir_objection(const std::string& dir, RunDirUse use, bool renew) {
  const RunDirState state = inspect_run_dir(dir);  // a path no run could use: thrown
  try {
    check_not_in_use(dir);
    check_run_dir_use(dir, state, use, renew);
    check_writable(dir);
  } catch (const RunDirError& e) {
    return e.what();
  }
  return "";
}

std::optional<std::string> run_dir_of_checkpoint(const std::string& file) {
  std::error_code ec;
  const fs::path path = fs::absolute(file, ec).lexically_normal();
  if (ec || path.parent_path().filename() != "checkpoints") return std::nullopt;
  const std::string dir = path.parent_path().parent_path().string();
  try {
    const RunDirState s = inspect_run_dir(dir);
    if (s.kind == RunDirKind::run && (s.locked_once || !s.others)) return dir;
  } catch (const RunDirError&) {
  }
  return std::nullopt;
}

}  // namespace trainrun
