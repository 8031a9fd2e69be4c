// Sharded checkpoints: shards written by "ranks" (here one process) read back as the exact full
// state, commit waits for every file and refuses a wrong one, damage to any part is named, the
// manifest's metadata record parses back to what was written, the CRC-32C's fast path agrees
// with the table, and the reader thread under a read hands over every byte in order.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "../src/checkpoint/checkpoint_metadata.h"
#include "../src/checkpoint/direct_write.h"
#include "../src/checkpoint/sharded_checkpoint.h"
#include "../src/checkpoint/slab_reader.h"
#include "temp_dir.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/crc32c.h"
#include "trainrun/core/errors.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

using trainrun::testing::TempDir;

CheckpointData full_state(int64_t step, int world, uint32_t seed) {
  CheckpointData d;
  d.params = {{"wte", {37, 11}, 0}, {"blocks.0.fc.bias", {13}, 407}, {"ln_f.scale", {5, 3}, 424}};
  const size_t n = 439 + 2;  // two elements of padding at the end
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (auto* v : {&d.weights, &d.adam_m, &d.adam_v}) {
    v->assign(n, 0.0f);
    for (float& x : *v) x = normal(rng);
  }
  d.state.step = step;
  d.state.tokens_seen = step * 100;
  d.state.samples_seen = step * 4 + 1;
  d.state.seed = 0x0123456789abcdefull;
  d.state.lr_scale = 0.5;
  d.state.world_size = world;
  d.state.config_yaml = "model:\n  n_layer: 1\n";
  return d;
}

CheckpointShard shard_of_state(const CheckpointData& d, int rank) {
  CheckpointShard s;
  s.state = d.state;
  s.params = d.params;
  s.flat_size = static_cast<int64_t>(d.weights.size());
  s.rank = rank;
  s.range = shard_of(s.flat_size, d.state.world_size, rank);
  auto part = [&](const StateBuffer& v) {
    return StateBuffer(v.begin() + s.range.begin, v.begin() + s.range.end);
  };
  s.weights = part(d.weights);
  s.adam_m = part(d.adam_m);
  s.adam_v = part(d.adam_v);
  return s;
}

std::string save_all(const std::string& run_dir, const CheckpointData& d) {
  const std::string dir = sharded_checkpoint_path(run_dir, d.state.step);
  for (int r = 0; r < d.state.world_size; ++r) write_shard(dir, shard_of_state(d, r));
  commit_sharded(dir, d.state.step, d.state.world_size, 1.0);
  return dir;
}

// Where a shard's contiguous data set starts in the file.
std::streamoff data_offset(const std::string& file, const char* dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(ds);
  H5Dclose(ds);
  H5Fclose(f);
  REQUIRE(at != HADDR_UNDEF);
  return static_cast<std::streamoff>(at);
}

void flip_byte_at(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(at);
  f.write(&c, 1);
}

// The byte at `frac` of the file's length.
void flip_byte(const std::string& path, double frac) {
  const auto size = static_cast<double>(fs::file_size(path));
  flip_byte_at(path, static_cast<std::streamoff>(size * frac));
}

}  // namespace

TEST_CASE("shards of 1, 2, 3 and 7 ranks read back as the exact full state") {
  for (int world : {1, 2, 3, 7}) {
    CAPTURE(world);
    TempDir tmp;
    const CheckpointData d = full_state(40, world, 7u + static_cast<uint32_t>(world));
    const std::string dir = save_all(tmp.str(), d);
    CHECK(list_checkpoints(tmp.str()) == std::vector<std::string>{dir});
    CHECK(verify_checkpoint(dir).ok);
    const CheckpointData back = read_checkpoint(dir);
    CHECK(back.weights == d.weights);
    CHECK(back.adam_m == d.adam_m);
    CHECK(back.adam_v == d.adam_v);
    CHECK(back.state.step == 40);
    CHECK(back.state.samples_seen == d.state.samples_seen);
    CHECK(back.state.seed == d.state.seed);
    CHECK(back.state.lr_scale == 0.5);
    CHECK(back.state.world_size == world);
    CHECK(back.state.config_yaml == d.state.config_yaml);
    REQUIRE(back.params.size() == d.params.size());
    for (size_t i = 0; i < d.params.size(); ++i) {
      CHECK(back.params[i].name == d.params[i].name);
      CHECK(back.params[i].offset == d.params[i].offset);
      CHECK(back.params[i].shape == d.params[i].shape);
    }
    CHECK(!is_run_directory(dir));
    CHECK(is_run_directory(tmp.str()));
  }
}

TEST_CASE("a ranged read keeps one range of the moments and reads only the files holding it") {
  TempDir tmp;
  const CheckpointData d = full_state(30, 3, 11);
  const std::string dir = save_all(tmp.str(), d);
  // Every rank of a world of 2, and ranges that cut files in odd places.
  std::vector<Shard> ranges = {shard_of(441, 2, 0), shard_of(441, 2, 1), {0, 441}, {5, 6},
                               {146, 295},          {440, 441},          {7, 7}};
  for (const Shard& r : ranges) {
    CAPTURE(r.begin);
    CAPTURE(r.end);
    const CheckpointData back = read_checkpoint(dir, r);
    CHECK(back.weights == d.weights);
    CHECK(back.moments_begin == r.begin);
    CHECK(back.adam_m == StateBuffer(d.adam_m.begin() + r.begin, d.adam_m.begin() + r.end));
    CHECK(back.adam_v == StateBuffer(d.adam_v.begin() + r.begin, d.adam_v.begin() + r.end));
  }
  // A damaged moment in the last file: a rank whose range lies in the first file never reads
  // it (its owner does, and a full verification does).
  const std::string last = (fs::path(dir) / "rank-00002-of-00003.h5").string();
  flip_byte_at(last, data_offset(last, "/adam_m") + 5);
  CHECK(read_checkpoint(dir, Shard{0, 100}).adam_m.size() == 100);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, Shard{0, 441}),
                       doctest::Contains("rank-00002-of-00003.h5"), CheckpointError);
  CHECK(!verify_checkpoint(dir).ok);
}

TEST_CASE("commit waits for every rank's file, and refuses a missing or foreign one") {
  TempDir tmp;
  const CheckpointData d = full_state(10, 3, 1);
  const std::string dir = sharded_checkpoint_path(tmp.str(), 10);
  write_shard(dir, shard_of_state(d, 0));
  write_shard(dir, shard_of_state(d, 2));
  // Rank 1 is late: the commit waits for it.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    write_shard(dir, shard_of_state(d, 1));
  });
  commit_sharded(dir, 10, 3, 30.0);
  late.join();
  CHECK(verify_checkpoint(dir).ok);

  // A rank that never writes: no manifest, an error naming its file.
  const CheckpointData e = full_state(20, 2, 2);
  const std::string dir2 = sharded_checkpoint_path(tmp.str(), 20);
  write_shard(dir2, shard_of_state(e, 0));
  CHECK_THROWS_WITH_AS(commit_sharded(dir2, 20, 2, 0.1),
                       doctest::Contains("rank-00001-of-00002.h5 did not appear"),
                       CheckpointWriteError);
  CHECK(!has_manifest(dir2));
  CHECK(list_checkpoints(tmp.str()).size() == 1);  // the unfinished folder is not listed
  CHECK(verify_checkpoint(dir2).reason.find("no MANIFEST") != std::string::npos);

  // A file of another step in rank 1's place.
  fs::copy_file(fs::path(dir) / "rank-00000-of-00003.h5",
                fs::path(dir2) / "rank-00001-of-00002.h5");
  CHECK_THROWS_AS(commit_sharded(dir2, 20, 2, 0.1), CheckpointWriteError);
  CHECK(!has_manifest(dir2));
}

TEST_CASE("a wrong range or a non-finite shard is never written") {
  TempDir tmp;
  const CheckpointData d = full_state(5, 2, 3);
  CheckpointShard s = shard_of_state(d, 1);
  s.range.begin += 1;
  CHECK_THROWS_AS(write_shard(tmp / "x", s), CheckpointWriteError);
  CheckpointShard bad = shard_of_state(d, 1);
  bad.adam_v[3] = std::numeric_limits<float>::infinity();
  const std::string why = non_finite_reason(bad);
  CHECK(why.find("rank 1") != std::string::npos);
  CHECK(why.find("optimizer/v/") != std::string::npos);
  Checkpointer ck(tmp.str(), 3, false, 1);
  CHECK_THROWS_AS(ck.save_shard(std::move(bad)), NonFiniteCheckpoint);
  CHECK(!fs::exists(sharded_checkpoint_path(tmp.str(), 5)));
}

TEST_CASE("damage to a shard or the manifest is named, and the previous checkpoint is used") {
  for (const std::string damage : {"shard", "manifest", "swap", "truncated"}) {
    CAPTURE(damage);
    TempDir tmp;
    const CheckpointData older = full_state(10, 2, 4), newer = full_state(20, 2, 5);
    const std::string old_dir = save_all(tmp.str(), older);
    const std::string dir = save_all(tmp.str(), newer);
    const std::string shard = (fs::path(dir) / "rank-00001-of-00002.h5").string();
    if (damage == "shard") {  // a byte of the weights (what lies around them is HDF5's padding)
      flip_byte_at(shard, data_offset(shard, "/weights") + 5);
    } else if (std::string(damage) == "truncated") {  // a copy that stopped short
      fs::resize_file(shard, fs::file_size(shard) * 3 / 4);
    } else if (std::string(damage) == "manifest") {
      flip_byte((fs::path(dir) / "MANIFEST").string(), 0.3);
    } else {  // an intact shard of the same step but other data: only the CRC tells
      const CheckpointData other = full_state(20, 2, 99);
      fs::remove(shard);
      write_shard(dir, shard_of_state(other, 1));
    }
    const Verdict v = verify_checkpoint(dir);
    CHECK(!v.ok);
    CHECK(!v.unusable);
    if (std::string(damage) != "manifest")
      CHECK(v.reason.find("rank-00001-of-00002.h5") != std::string::npos);
    else
      CHECK(v.reason.find("MANIFEST") != std::string::npos);
    std::vector<std::string> warnings;
    CHECK(latest_good_checkpoint(tmp.str(), &warnings) == old_dir);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("falling back to " + old_dir) != std::string::npos);
  }
}

TEST_CASE("the Checkpointer writes shards, commits on rank 0 and prunes whole folders") {
  for (bool async : {false, true}) {
    CAPTURE(async);
    TempDir tmp;
    // Unfinished saves: one of ours (a lone shard file), and a folder holding a stranger's file.
    const CheckpointData early = full_state(6, 2, 6);
    write_shard(sharded_checkpoint_path(tmp.str(), 6), shard_of_state(early, 0));
    fs::create_directories(sharded_checkpoint_path(tmp.str(), 5));
    std::ofstream(fs::path(sharded_checkpoint_path(tmp.str(), 5)) / "notes.txt") << "mine\n";
    Checkpointer r0(tmp.str(), 2, async, 0), r1(tmp.str(), 2, async, 1);
    for (int64_t step : {10, 20, 30}) {
      const CheckpointData d = full_state(step, 2, static_cast<uint32_t>(step));
      r1.save_shard(shard_of_state(d, 1));
      r0.save_shard(shard_of_state(d, 0));
      r1.wait();
      if (!async) r0.commit(step, 2);
      r0.wait();
      CHECK(read_checkpoint(sharded_checkpoint_path(tmp.str(), step)).weights == d.weights);
    }
    CHECK(list_checkpoints(tmp.str()) ==
          std::vector<std::string>{sharded_checkpoint_path(tmp.str(), 30),
                                   sharded_checkpoint_path(tmp.str(), 20)});
    CHECK(!fs::exists(sharded_checkpoint_path(tmp.str(), 10)));
    CHECK(!fs::exists(sharded_checkpoint_path(tmp.str(), 6)));  // never resumable: pruned
    CHECK(fs::exists(fs::path(sharded_checkpoint_path(tmp.str(), 5)) / "notes.txt"));  // not ours
    // The last snapshot's buffers come back for the next one (same memory, sizes kept), once.
    CheckpointShard again = r1.reuse_shard();
    CHECK(again.weights.size() == static_cast<size_t>(shard_of(441, 2, 1).size()));
    CHECK(again.adam_v.capacity() >= again.weights.size());
    CHECK(r1.reuse_shard().weights.empty());
  }
}

TEST_CASE("a single-file Checkpointer hands the written snapshot's buffers back") {
  for (bool async : {false, true}) {
    CAPTURE(async);
    TempDir tmp;
    Checkpointer ck(tmp.str(), 2, async);
    CHECK(ck.reuse_data().weights.empty());  // nothing written yet
    CheckpointData d = full_state(10, 1, 3);
    const float* buffer = d.weights.data();
    ck.save(std::move(d));
    ck.wait();
    CheckpointData back = ck.reuse_data();
    CHECK(back.weights.data() == buffer);  // the very allocation, not a copy
    CHECK(back.weights.size() == 441);
  }
}

TEST_CASE("the metadata record parses back to what was written") {
  Header h;
  h.format_version = 3;
  h.trainrun_version = "0.1.0";
  h.created = "2026-12-01T07:00:00Z";
  h.state.step = 123;
  h.state.tokens_seen = 1ll << 40;
  h.state.samples_seen = 77;
  h.state.seed = 0xffffffffffffffffull;
  h.state.bad_steps_total = 3;
  h.state.restarts = 2;
  h.state.lr_scale = 0.1 * 0.3;  // not exact in binary: must come back bit for bit
  h.state.world_size = 8;
  h.flat_size = 1000;
  h.param_count = 2;
  Layout l;
  l.params = {{"a.weight", {10, 20}, 0}, {"scalar", {}, 200}};
  l.has_optimizer = true;
  l.config_bytes = 42;
  Header h2;
  Layout l2;
  REQUIRE(parse_metadata_record(metadata_record(h, l), &h2, &l2) == "");
  CHECK(metadata_record(h2, l2) == metadata_record(h, l));
  CHECK(h2.state.lr_scale == h.state.lr_scale);
  CHECK(h2.state.seed == h.state.seed);
  CHECK(parse_metadata_record("step=x\n", &h2, &l2) != "");
  CHECK(parse_metadata_record("param=a offset=1 shape=[2, q]\n", &h2, &l2) != "");
}

TEST_CASE("CRC-32C: the 8-byte path equals the table at every length and split") {
  std::string data(1031, '\0');
  std::mt19937 rng(9);
  for (char& c : data) c = static_cast<char>(rng());
  auto bytewise = [](std::string_view s, uint32_t crc) {
    for (unsigned char b : s) crc = crc32c(std::string_view(reinterpret_cast<char*>(&b), 1), crc);
    return crc;
  };
  for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1031u}) {
    CAPTURE(len);
    const std::string_view s(data.data(), len);
    CHECK(crc32c(s) == bytewise(s, 0));
    // Continuing at an odd offset gives the CRC of the whole.
    const size_t cut = len / 3;
    CHECK(crc32c(s.substr(cut), crc32c(s.substr(0, cut))) == crc32c(s));
  }
}

namespace {

// A file of `n` bytes, byte i = i * 7 mod 251 (no period that divides a slab), opened to read.
struct PatternFile {
  TempDir tmp;
  std::string path = tmp / "pattern.bin";
  int fd = -1;
  explicit PatternFile(size_t n) {
    std::string bytes(n, '\0');
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(i * 7 % 251);
    std::ofstream(path, std::ios::binary) << bytes;
    fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
  }
  ~PatternFile() { ::close(fd); }
};

}  // namespace

TEST_CASE("read_slabs hands every slab over in order, into place or through its ring") {
  const size_t slab = 4096, bytes = 40 * slab + 123;  // more slabs than the ring, a short last one
  PatternFile file(bytes + 1000);
  const off_t offset = 1000;
  for (bool into_place : {true, false}) {
    CAPTURE(into_place);
    std::vector<char> out(into_place ? bytes : 0);
    std::string seen;
    read_slabs(file.fd, offset, bytes, slab, into_place ? out.data() : nullptr,
               [&](const char* p, size_t n) {
                 if (into_place) CHECK(p == out.data() + seen.size());
                 CHECK(n == std::min(slab, bytes - seen.size()));
                 seen.append(p, n);
               });
    REQUIRE(seen.size() == bytes);
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; ++i)
      wrong += seen[i] != static_cast<char>((i + offset) * 7 % 251);
    CHECK(wrong == 0);
    if (into_place) CHECK(std::string(out.begin(), out.end()) == seen);
  }
}

TEST_CASE("read_slabs reads several ranges in one pipeline, each to its own place and check") {
  const size_t slab = 4096;
  PatternFile file(100 * slab);
  // Ring, in place, ring: the ring's reuse spans the range in between.
  const off_t at[3] = {0, static_cast<off_t>(30 * slab), static_cast<off_t>(45 * slab + 7)};
  const size_t len[3] = {20 * slab + 5, 10 * slab, 12 * slab + 1};
  std::vector<char> place(len[1]);
  std::string seen[3];
  std::vector<int> order;
  std::vector<SlabRange> ranges;
  for (int r = 0; r < 3; ++r)
    ranges.push_back(
        {at[r], len[r], r == 1 ? place.data() : nullptr, [&, r](const char* p, size_t n) {
           seen[r].append(p, n);
           order.push_back(r);
         }});
  read_slabs(file.fd, ranges, slab);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    REQUIRE(seen[r].size() == len[r]);
    size_t wrong = 0;
    for (size_t i = 0; i < len[r]; ++i)
      wrong += seen[r][i] != static_cast<char>((static_cast<size_t>(at[r]) + i) * 7 % 251);
    CHECK(wrong == 0);
  }
  CHECK(std::string(place.begin(), place.end()) == seen[1]);
  CHECK(std::is_sorted(order.begin(), order.end()));  // range by range, in order
}

TEST_CASE("read_slabs: a file that ends early is an error; a failing check stops the reader") {
  const size_t slab = 4096;
  PatternFile file(10 * slab);
  size_t calls = 0;
  CHECK_THROWS_WITH_AS(
      read_slabs(file.fd, 0, 20 * slab, slab, nullptr, [&](const char*, size_t) { ++calls; }),
      doctest::Contains("ends at byte 40960"), SlabReadError);
  CHECK(calls == 10);  // everything before the end was still handed over
  calls = 0;
  CHECK_THROWS_WITH(read_slabs(file.fd, 0, 10 * slab, slab, nullptr,
                               [&](const char*, size_t) {
                                 if (++calls == 3) throw std::runtime_error("slab 3 is bad");
                               }),
                    "slab 3 is bad");
  CHECK(calls == 3);
}

TEST_CASE("a state of many pages is written past the page cache and reads back exactly") {
  // Shards of ~105K floats: data sets page-aligned (>= 64 KiB) with a tail that is not a whole
  // page, so both the direct prefix and the HDF5-written tail are in every file.
  CheckpointData d;
  d.params = {{"wte", {70001, 3}, 0}};
  const size_t n = 210003 + 5;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto* v : {&d.weights, &d.adam_m, &d.adam_v}) {
    v->resize(n);
    for (float& x : *v) x = normal(rng);
  }
  d.state.step = 30;
  d.state.world_size = 2;
  d.state.config_yaml = "model: {}\n";
  TempDir tmp;
  const std::string dir = save_all(tmp.str(), d);
  CHECK(verify_checkpoint(dir).ok);  // the CRCs taken while writing match the bytes on disk
  const CheckpointData back = read_checkpoint(dir);
  CHECK(back.weights == d.weights);
  CHECK(back.adam_m == d.adam_m);
  CHECK(back.adam_v == d.adam_v);
  flip_byte((fs::path(dir) / "rank-00000-of-00002.h5").string(), 0.4);  // inside the prefix
  const Verdict v = verify_checkpoint(dir);
  CHECK(!v.ok);
  CHECK(v.reason.find("CRC-32C") != std::string::npos);
}

TEST_CASE("write_direct_prefix writes whole pages from aligned memory, else nothing") {
  TempDir tmp;
  const std::string path = tmp / "direct.bin";
  const size_t bytes = 3 * kDirectAlign + 100;
  { std::ofstream(path, std::ios::binary) << std::string(8 * kDirectAlign, 'x'); }
  StateBuffer buf(bytes / sizeof(float));  // page-aligned by its allocator
  REQUIRE(reinterpret_cast<uintptr_t>(buf.data()) % kDirectAlign == 0);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
  const char* data = reinterpret_cast<const char*>(buf.data());
  std::vector<std::pair<const char*, size_t>> calls;
  auto each = [&](const char* p, size_t k) { calls.emplace_back(p, k); };

  // Misaligned offset or buffer: nothing written, `each` never called.
  CHECK(write_direct_prefix(path, 100, data, bytes, kDirectAlign, each) == 0);
  CHECK(write_direct_prefix(path, 0, data + 4, bytes - 4, kDirectAlign, each) == 0);
  CHECK(calls.empty());

  const int probe = ::open(path.c_str(), O_WRONLY | O_DIRECT);
  const bool supported = probe >= 0;
  if (probe >= 0) ::close(probe);
  const size_t wrote = write_direct_prefix(path, kDirectAlign, data, bytes, 2 * kDirectAlign, each);
  if (!supported) {  // a file system without direct I/O: the caller writes it all
    CHECK(wrote == 0);
    return;
  }
  REQUIRE(wrote == 3 * kDirectAlign);
  REQUIRE(calls.size() == 2);  // slabs of 2 pages, then 1, in order
  CHECK(calls[0] == std::make_pair(data, 2 * kDirectAlign));
  CHECK(calls[1] == std::make_pair(data + 2 * kDirectAlign, kDirectAlign));
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(file.size() == 8 * kDirectAlign);
  CHECK(file.substr(0, kDirectAlign) == std::string(kDirectAlign, 'x'));
  CHECK(file.compare(kDirectAlign, wrote, data, wrote) == 0);
  CHECK(file.substr(kDirectAlign + wrote) == std::string(4 * kDirectAlign, 'x'));
}
