// Document indexes (docs/data-format.md, "Document index"): what `data prepare` writes agrees with
// the end-of-text rule of documents.h (or, without an id, with the inputs), reads back through a
// dataset as each window's document starts, and one that disagrees with its shard is refused.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "trainrun/core/crc32c.h"
#include "trainrun/core/documents.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/tokenizer.h"

using namespace trainrun;
namespace fs = std::filesystem;
using trainrun::testing::TempDir;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// n documents of 3-40 bytes of text in dir/NN.txt; returns their sizes.
std::vector<uint64_t> write_documents(const std::string& dir, int n) {
  fs::create_directories(dir);
  std::vector<uint64_t> sizes;
  const std::string words = "the cat sat on a mat and then it ran off to see the dog ";
  for (int i = 0; i < n; ++i) {
    const size_t len = 3 + static_cast<size_t>((i * 13) % 38);
    std::string text;
    for (size_t k = 0; k < len; ++k) text += words[(i * 7 + k) % words.size()];
    char name[32];
    std::snprintf(name, sizeof name, "/%02d.txt", i);
    write_bytes(dir + name, text);
    sizes.push_back(len);
  }
  return sizes;
}

DataConfig masked(const std::string& dir, int64_t eot = -1) {
  DataConfig d;
  d.train = dir + "/train.bin";
  d.val = dir + "/val.bin";
  d.document_masking = true;
  d.eot = eot;
  return d;
}

std::vector<int32_t> read_all(const TokenDataset& ds) {
  std::vector<int32_t> v(static_cast<size_t>(ds.num_tokens()));
  ds.read(0, ds.num_tokens(), v.data());
  return v;
}

// Every window [pos, pos + T) of ds at random positions: the index's starts equal the rule's.
void check_windows_match_the_rule(const TokenDataset& ds, int32_t eot) {
  REQUIRE(ds.has_document_index());
  const auto ids = read_all(ds);
  std::mt19937_64 rng(7);
  for (const int64_t T : {1, 7, 32, 200}) {
    if (T > ds.num_tokens()) continue;
    for (int k = 0; k < 50; ++k) {
      const auto pos = static_cast<int64_t>(rng() % static_cast<uint64_t>(ds.num_tokens() - T + 1));
      std::vector<int32_t> got(static_cast<size_t>(T)), want(static_cast<size_t>(T));
      ds.document_starts(pos, T, got.data());
      document_starts(ids.data() + pos, 1, T, eot, want.data());
      INFO("pos " << pos << " T " << T);
      REQUIRE(got == want);
    }
  }
}

// An index file as docs/data-format.md lays it out, with a correct CRC unless told otherwise;
// `shard`: the tokens of a shard short enough that its sampled CRC covers all of them.
std::string index_bytes(int32_t eot, uint64_t tokens, const std::vector<uint64_t>& starts,
                        const std::vector<int32_t>& shard, uint32_t crc_xor = 0) {
  std::string body(reinterpret_cast<const char*>(starts.data()), starts.size() * 8);
  std::string h(64, '\0');
  std::memcpy(h.data(), "TRNDOCIX", 8);
  const uint32_t version = 1;
  const uint64_t count = starts.size();
  const uint32_t crc = crc32c(body) ^ crc_xor;
  std::memcpy(h.data() + 8, &version, 4);
  std::memcpy(h.data() + 12, &eot, 4);
  std::memcpy(h.data() + 16, &tokens, 8);
  std::memcpy(h.data() + 24, &count, 8);
  std::memcpy(h.data() + 32, &crc, 4);
  REQUIRE(shard.size() <= 65536);
  const uint32_t shard_crc =
      crc32c(std::string_view(reinterpret_cast<const char*>(shard.data()), shard.size() * 4));
  std::memcpy(h.data() + 36, &shard_crc, 4);
  return h + body;
}

void expect_refused(const DataConfig& d, const std::vector<std::string>& parts) {
  bool thrown = false;
  try {
    open_dataset(d, Split::train, 256, 0);
  } catch (const DataError& e) {
    thrown = true;
    CHECK(e.code() == 3);
    const std::string msg = e.what();
    INFO("message: " << msg);
    for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, p);
  }
  CHECK_MESSAGE(thrown, "no DataError");
}

// `data prepare` of n documents written to tmp/in_NAME into tmp/NAME (byte-level unless req says).
std::vector<uint64_t> prepare(const TempDir& tmp, const std::string& name, int n,
                              PrepareRequest req = {}) {
  const auto sizes = write_documents(tmp / ("in_" + name), n);
  req.texts = {tmp / ("in_" + name)};
  req.out_dir = tmp / name;
  prepare_shards(req);
  return sizes;
}

}  // namespace

TEST_CASE("byte-level prepare: the index holds the end-of-text rule's starts, in both splits") {
  TempDir tmp;
  PrepareRequest req;
  req.val_fraction = 0.3;
  prepare(tmp, "s", 60, req);
  CHECK(fs::exists(tmp / "s/train.idx"));
  CHECK(fs::exists(tmp / "s/val.idx"));
  for (const Split split : {Split::train, Split::val}) {
    const auto ds = open_dataset(masked(tmp / "s"), split, 256, 0);
    check_windows_match_the_rule(*ds, 0);
  }
  // Without data.document_masking the index is not opened (nothing to check or use).
  DataConfig plain = masked(tmp / "s");
  plain.document_masking = false;
  CHECK_FALSE(open_dataset(plain, Split::train, 256, 0)->has_document_index());
}

TEST_CASE("tokenized prepare: the index holds the end-of-text rule's starts (--eot ID)") {
  TempDir tmp;
  write_documents(tmp / "in", 50);
  std::string all;
  for (const auto& e : fs::directory_iterator(tmp / "in")) {
    std::ifstream f(e.path(), std::ios::binary);
    all += std::string(std::istreambuf_iterator<char>(f), {});
  }
  train_tokenizer_on_text(all, 300).save(tmp / "tok.json");
  PrepareRequest req;
  req.texts = {tmp / "in"};
  req.out_dir = tmp / "s";
  req.tokenizer = tmp / "tok.json";
  req.val_fraction = 0.3;
  req.eot = 3;  // this tokenizer has no <|endoftext|>: an id of its own vocabulary instead
  prepare_shards(req);
  const Tokenizer tok = Tokenizer::load(tmp / "tok.json");
  for (const Split split : {Split::train, Split::val}) {
    const auto ds = open_dataset(masked(tmp / "s"), split, tok.vocab_size(), 0);
    check_windows_match_the_rule(*ds, 3);
  }
}

TEST_CASE("--eot none: the index starts a document at each input, across the split") {
  TempDir tmp;
  PrepareRequest req;
  req.eot = kEotNone;
  req.val_fraction = 0.25;
  const auto sizes = prepare(tmp, "s", 40, req);
  const auto train = open_dataset(masked(tmp / "s"), Split::train, 256, 0);
  const auto val = open_dataset(masked(tmp / "s"), Split::val, 256, 0);
  // The expected doc_start of every token of the stream train + val, each split from 0.
  const int64_t ntrain = train->num_tokens(), total = ntrain + val->num_tokens();
  std::vector<int32_t> want(static_cast<size_t>(total));
  int64_t begin = 0, next = 0;
  size_t doc = 0;
  for (int64_t p = 0; p < total; ++p) {
    while (doc < sizes.size() && next <= p) {
      begin = next;
      next += static_cast<int64_t>(sizes[doc++]);
    }
    want[static_cast<size_t>(p)] =
        static_cast<int32_t>(p < ntrain ? begin : std::max(begin, ntrain) - ntrain);
  }
  std::vector<int32_t> got(static_cast<size_t>(total));
  train->document_starts(0, ntrain, got.data());
  val->document_starts(0, total - ntrain, got.data() + ntrain);
  CHECK(got == want);
  // A window's starts are relative to it and never before it.
  std::vector<int32_t> w(20);
  train->document_starts(5, 20, w.data());
  for (int i = 0; i < 20; ++i)
    CHECK(w[static_cast<size_t>(i)] == std::max<int32_t>(want[static_cast<size_t>(5 + i)] - 5, 0));
}

TEST_CASE("shards read as one stream: each shard begins a document") {
  TempDir tmp;
  for (const char* part : {"a", "b"}) prepare(tmp, part, 10);
  fs::create_directories(tmp / "both");
  for (const char* part : {"a", "b"})
    for (const char* ext : {".bin", ".idx"})
      fs::copy_file(tmp / (std::string(part) + "/train" + ext),
                    tmp / (std::string("both/") + part + ext));
  DataConfig d;
  d.train = tmp / "both";
  d.val_fraction = 0.1;
  d.document_masking = true;
  const auto ds = open_dataset(d, Split::train, 256, 0);
  REQUIRE(ds->has_document_index());
  const auto a_tokens = open_dataset(masked(tmp / "a"), Split::train, 256, 0)->num_tokens();
  // A window across the boundary: a new document at b's first token, as no id precedes it.
  std::vector<int32_t> got(10);
  ds->document_starts(a_tokens - 4, 10, got.data());
  for (int i = 4; i < 10; ++i) CHECK(got[static_cast<size_t>(i)] >= 4);
  CHECK(got[4] == 4);
  // One shard without its index: the stream has none (masking falls back to the id).
  fs::remove(tmp / "both/b.idx");
  CHECK_FALSE(open_dataset(d, Split::train, 256, 0)->has_document_index());
}

TEST_CASE("an index that disagrees with its shard is a DataError naming both and the fix") {
  TempDir tmp;
  prepare(tmp, "s", 20);
  const std::string idx = tmp / "s/train.idx";
  const DataConfig d = masked(tmp / "s");
  const auto ds = open_dataset(d, Split::train, 256, 0);
  const auto n = static_cast<uint64_t>(ds->num_tokens());
  const auto ids = read_all(*ds);
  std::vector<uint64_t> good = {0};
  for (uint64_t i = 0; i + 1 < n; ++i)
    if (ids[i] == 0) good.push_back(i + 1);
  REQUIRE(good.size() > 3);
  // The good one, written by hand from the documented layout, is accepted.
  write_bytes(idx, index_bytes(0, n, good, ids));
  CHECK(open_dataset(d, Split::train, 256, 0)->has_document_index());
  const std::vector<std::string> fix = {idx, "run `trainrun data prepare` again"};
  auto with = [&](std::vector<std::string> parts) {
    parts.insert(parts.end(), fix.begin(), fix.end());
    return parts;
  };
  write_bytes(idx, index_bytes(0, n + 1, good, ids));
  expect_refused(d, with({"it indexes " + std::to_string(n + 1) + " tokens"}));
  write_bytes(idx, index_bytes(0, n, good, ids, 1));
  expect_refused(d, with({"CRC-32C"}));
  auto shifted = good;
  shifted[2] += 1;
  write_bytes(idx, index_bytes(0, n, shifted, ids));
  expect_refused(d, with({"document 2 starts at", "not the end-of-text id 0"}));
  auto unordered = good;
  std::swap(unordered[1], unordered[2]);
  write_bytes(idx, index_bytes(0, n, unordered, ids));
  expect_refused(d, with({"out of order"}));
  write_bytes(idx, index_bytes(0, n, good, ids).substr(0, 64 + 8 * good.size() - 3));
  expect_refused(d, with({"bytes of starts"}));
  write_bytes(idx, "TRNTOKEN" + index_bytes(0, n, good, ids).substr(8));
  expect_refused(d, with({"bad magic"}));
  write_bytes(idx, "short");
  expect_refused(d, with({"shorter than its 64-byte header"}));
  // The shard changed (same size) after its index was written.
  auto changed = ids;
  changed[n / 2] = changed[n / 2] == 'a' ? 'b' : 'a';
  write_bytes(idx, index_bytes(0, n, good, changed));
  expect_refused(d, with({"the shard's tokens changed since the index was written"}));
  // An index written for another id than data.eot.
  write_bytes(idx, index_bytes(0, n, good, ids));
  expect_refused(masked(tmp / "s", 7), {idx, "end-of-text id 0 but data.eot is 7"});
}

namespace {

// Runs fn in a child process (its stderr captured): how it ended and what it wrote. For faults
// that end the process by design.
struct ChildEnd {
  int status = 0;
  std::string err;
};
template <typename Fn>
ChildEnd in_child(Fn fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    try {
      fn();
    } catch (const std::exception& e) {  // never back into the test runner in the child
      std::fprintf(stderr, "threw: %s\n", e.what());
      ::_exit(99);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildEnd end;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) end.err.append(buf, size_t(n));
  ::close(fds[0]);
  ::waitpid(pid, &end.status, 0);
  return end;
}

}  // namespace

TEST_CASE("a shard or index truncated while mapped ends the process with exit 3 naming it") {
  // Truncating a mapped file (what `cp new.bin train.bin` does first) makes reading it SIGBUS:
  // every rank died with exit 135 and no message (issue 43 item 5).
  TempDir tmp;
  prepare(tmp, "s", 40);
  const std::string shard = tmp / "s/train.bin", index = tmp / "s/train.idx";
  const ChildEnd shard_cut = in_child([&] {
    const auto ds = open_dataset(masked(tmp / "s"), Split::train, 256, 0);
    REQUIRE(::truncate(shard.c_str(), 0) == 0);
    std::vector<int32_t> out(static_cast<size_t>(ds->num_tokens()));
    ds->read(0, ds->num_tokens(), out.data());
  });
  CHECK(WIFEXITED(shard_cut.status));
  CHECK(WEXITSTATUS(shard_cut.status) == kExitData);
  CHECK_MESSAGE(
      shard_cut.err.find("error: " + shard + ": the file changed while trainrun read it") !=
          std::string::npos,
      shard_cut.err);

  prepare(tmp, "t", 40);
  const std::string index_t = tmp / "t/train.idx";
  const ChildEnd index_cut = in_child([&] {
    const auto ds = open_dataset(masked(tmp / "t"), Split::train, 256, 0);
    REQUIRE(ds->has_document_index());
    REQUIRE(::truncate(index_t.c_str(), 0) == 0);
    std::vector<int32_t> out(16);
    ds->document_starts(ds->num_tokens() - 16, 16, out.data());
  });
  CHECK(WIFEXITED(index_cut.status));
  CHECK(WEXITSTATUS(index_cut.status) == kExitData);
  CHECK_MESSAGE(index_cut.err.find("error: " + index_t + ": the file changed") != std::string::npos,
                index_cut.err);

  // A SIGBUS outside every mapped shard is still one (the handler that was there, or the
  // default): the handler names only the files it maps.
  const std::string other = tmp / "other";
  write_bytes(other, std::string(8192, 'x'));
  prepare(tmp, "u", 40);
  const ChildEnd elsewhere = in_child([&] {
    ::signal(SIGBUS, SIG_DFL);
    const auto ds = open_dataset(masked(tmp / "u"), Split::train, 256, 0);  // the handler is in
    const int fd = ::open(other.c_str(), O_RDONLY);
    const auto* p =
        static_cast<const volatile char*>(::mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE, fd, 0));
    REQUIRE(::ftruncate(::open(other.c_str(), O_WRONLY), 0) == 0);
    std::printf("%d", p[100]);
  });
  CHECK_MESSAGE(WIFSIGNALED(elsewhere.status), elsewhere.err);
  CHECK(WTERMSIG(elsewhere.status) == SIGBUS);
}
