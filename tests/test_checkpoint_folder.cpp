// The checkpoint folder training writes (format 5, src/checkpoint/checkpoint_folder.h): the
// files of 1 to 7 ranks read back as the exact state, a ranged read opens only the files holding
// the range, commit waits for every file and refuses a missing or foreign one, damage to any
// part is named and the previous checkpoint used, the Checkpointer commits and prunes whole
// folders; and the pieces under it: the legacy sharded manifest's metadata record, the CRC-32C's
// fast path, the slab reader, and the direct writer.
#include <fcntl.h>

#include "../src/checkpoint/checkpoint_folder.h"
#include "../src/checkpoint/checkpoint_metadata.h"
#include "../src/checkpoint/direct_write.h"
#include "../src/checkpoint/slab_reader.h"
#include "checkpoint_support.h"  // the includes and helpers these tests share
#include "trainrun/core/crc32c.h"

using namespace trainrun;
using namespace trainrun::checkpoint_test;

namespace {

// Three tensors and two elements of padding at the end of the flat buffers (which a checkpoint
// does not hold: it speaks tensors).
CheckpointData full_state(int64_t step, int world, uint32_t seed) {
  CheckpointData d;
  d.params = {{"wte", {37, 11}, 0}, {"blocks.0.fc.bias", {13}, 407}, {"ln_f.scale", {5, 3}, 424}};
  const size_t n = 439 + 2;
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

std::string save_all(const std::string& run_dir, const CheckpointData& d) {
  return save_folder(run_dir, d, d.state.world_size);
}

// The byte at `frac` of the file's length.
void flip_byte_at_fraction(const std::string& path, double frac) {
  flip_byte(path, static_cast<uint64_t>(static_cast<double>(fs::file_size(path)) * frac));
}

// The flat elements `range` of a state's buffer, as read_flat_state fills them: the tensors'
// elements, and `fill` where the buffer has padding (which no checkpoint holds).
StateBuffer expected_range(const CheckpointData& d, const StateBuffer& flat, Shard range,
                           float fill) {
  StateBuffer out(static_cast<size_t>(range.size()), fill);
  for (const ParamEntry& p : d.params) {
    int64_t n = 1;
    for (int64_t x : p.shape) n *= x;
    for (int64_t i = std::max(p.offset, range.begin); i < std::min(p.offset + n, range.end); ++i)
      out[static_cast<size_t>(i - range.begin)] = flat[static_cast<size_t>(i)];
  }
  return out;
}

}  // namespace

TEST_CASE("the files of 1, 2, 3 and 7 ranks read back as the exact full state") {
  for (int world : {1, 2, 3, 7}) {
    CAPTURE(world);
    TempDir tmp;
    const CheckpointData d = full_state(40, world, 7u + static_cast<uint32_t>(world));
    const std::string dir = save_all(tmp.str(), d);
    CHECK(list_checkpoints(tmp.str()) == std::vector<std::string>{dir});
    for (int r = 0; r < world; ++r) CHECK(fs::exists(rank_file(dir, r, world)));
    CHECK(verify_checkpoint(dir).ok);
    CHECK(verify_checkpoint(dir).step == 40);
    check_same_tensors(read_checkpoint(dir), d, world);
    CHECK(!is_run_directory(dir));
    CHECK(is_run_directory(tmp.str()));
    CHECK(temp_files(tmp.str()).empty());
  }
}

TEST_CASE("a ranged read reads only the files holding the range") {
  TempDir tmp;
  const CheckpointData d = full_state(30, 3, 11);
  const std::string dir = save_all(tmp.str(), d);
  // Every rank of a world of 2, and ranges that cut files and tensors in odd places.
  const std::vector<Shard> ranges = {
      shard_of(441, 2, 0), shard_of(441, 2, 1), {0, 441}, {5, 6},
      {146, 295},          {440, 441},          {7, 7},   {400, 430}};
  TrainState st;
  std::unique_ptr<StateSource> src = open_checkpoint(dir, &st);
  CHECK(st.step == 30);
  CHECK(st.world_size == 3);
  for (const Shard& r : ranges) {
    CAPTURE(r.begin);
    CAPTURE(r.end);
    for (const char* prefix : {"model", "optimizer/m", "optimizer/v"}) {
      CAPTURE(prefix);
      const StateBuffer& flat = std::string(prefix) == "model"         ? d.weights
                                : std::string(prefix) == "optimizer/m" ? d.adam_m
                                                                       : d.adam_v;
      StateBuffer out(static_cast<size_t>(r.size()), -7.0f);
      read_flat_state(*src, prefix, d.params, r, out.data());
      CHECK(same_bits(out, expected_range(d, flat, r, -7.0f)));
    }
  }
  // A damaged moment in the last file: a rank whose range lies in the first file never reads
  // it (its owner does, and a full verification does).
  const std::string last = rank_file(dir, 2, 3);
  flip_byte(last, data_offset(last) + 4 * 100);
  StateBuffer part(100);
  read_flat_state(*open_checkpoint(dir, nullptr), "optimizer/m", d.params, {0, 100}, part.data());
  CHECK(same_bits(part, expected_range(d, d.adam_m, {0, 100}, 0.0f)));
  CHECK_THROWS_WITH_AS(read_checkpoint(dir), doctest::Contains("rank-00002-of-00003.h5"),
                       CheckpointError);
  CHECK(!verify_checkpoint(dir).ok);
  // Gone altogether: a rank whose range lies elsewhere still reads it (a restore opens only the
  // files holding what it needs), a read of what the file held names it.
  fs::remove(last);
  read_flat_state(*open_checkpoint(dir, nullptr), "optimizer/m", d.params, {0, 100}, part.data());
  CHECK(same_bits(part, expected_range(d, d.adam_m, {0, 100}, 0.0f)));
  CHECK_THROWS_WITH_AS(read_flat_state(*open_checkpoint(dir, nullptr), "optimizer/m", d.params,
                                       {400, 441}, part.data()),
                       doctest::Contains("rank-00002-of-00003.h5"), CheckpointError);
  const Verdict v = verify_checkpoint(dir);
  CHECK(!v.ok);
  CHECK(v.reason.find("rank-00002-of-00003.h5") != std::string::npos);
}

TEST_CASE("commit waits for every rank's file, and refuses a missing or foreign one") {
  TempDir tmp;
  const CheckpointData d = full_state(10, 3, 1);
  const std::string dir = checkpoint_path(tmp.str(), 10);
  write_rank_file(dir, snapshot_of(d, 0, 3));
  write_rank_file(dir, snapshot_of(d, 2, 3));
  // Rank 1 is late: the commit waits for it.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    write_rank_file(dir, snapshot_of(d, 1, 3));
  });
  commit_folder(dir, 10, 3, 30.0);
  late.join();
  CHECK(verify_checkpoint(dir).ok);

  // A rank that never writes: no manifest, an error naming the rank and its file.
  const CheckpointData e = full_state(20, 2, 2);
  const std::string dir2 = checkpoint_path(tmp.str(), 20);
  write_rank_file(dir2, snapshot_of(e, 0, 2));
  CHECK_THROWS_WITH_AS(commit_folder(dir2, 20, 2, 0.1),
                       doctest::Contains("rank 1's file rank-00001-of-00002.h5 did not appear"),
                       CheckpointWriteError);
  CHECK(!has_manifest(dir2));
  CHECK(list_checkpoints(tmp.str()) == std::vector<std::string>{dir});  // not a checkpoint
  CHECK(verify_checkpoint(dir2).reason.find("no MANIFEST") != std::string::npos);

  // A file of another step in rank 1's place.
  fs::copy_file(rank_file(dir, 0, 3), rank_file(dir2, 1, 2));
  CHECK_THROWS_WITH_AS(commit_folder(dir2, 20, 2, 0.1), doctest::Contains("rank-00001-of-00002.h5"),
                       CheckpointWriteError);
  CHECK(!has_manifest(dir2));

  // The files of an earlier attempt at this step by another world size are not part of it.
  const CheckpointData f = full_state(20, 1, 3);
  write_rank_file(dir2, snapshot_of(f, 0, 1));
  commit_folder(dir2, 20, 1, 1.0);
  CHECK(!fs::exists(rank_file(dir2, 0, 2)));
  CHECK(!fs::exists(rank_file(dir2, 1, 2)));
  check_same_tensors(read_checkpoint(dir2), f, 1);
}

TEST_CASE("a snapshot whose slices are not packed, or a non-finite one, is never written") {
  TempDir tmp;
  const CheckpointData d = full_state(5, 2, 3);
  RankSnapshot s = snapshot_of(d, 1, 2);
  s.slices[1].begin += 1;
  CHECK_THROWS_WITH_AS(write_rank_file(tmp / "x", s), doctest::Contains("rank-00001-of-00002.h5"),
                       CheckpointWriteError);
  CHECK(!fs::exists(rank_file(tmp / "x", 1, 2)));
  RankSnapshot bad = snapshot_of(d, 1, 2);
  bad.data[bad.data.size() - 3] = std::numeric_limits<float>::infinity();
  const std::string why = non_finite_reason(bad);
  CHECK(why.find("rank 1") != std::string::npos);
  CHECK(why.find("optimizer/v/ln_f.scale [") != std::string::npos);
  Checkpointer ck(tmp.str(), 3, false, 1);
  CHECK_THROWS_WITH_AS(ck.save(std::move(bad)), doctest::Contains("optimizer/v/ln_f.scale"),
                       NonFiniteCheckpoint);
  CHECK(!fs::exists(checkpoint_path(tmp.str(), 5)));
}

TEST_CASE("damage to a rank's file or the manifest is named, and the previous checkpoint is used") {
  for (const std::string damage : {"slices", "manifest", "swap", "truncated", "missing"}) {
    CAPTURE(damage);
    TempDir tmp;
    const CheckpointData older = full_state(10, 2, 4), newer = full_state(20, 2, 5);
    const std::string old_dir = save_all(tmp.str(), older);
    const std::string dir = save_all(tmp.str(), newer);
    const std::string file = rank_file(dir, 1, 2);
    if (damage == "slices") {  // a byte of its first slice (wte, from element 220 on)
      flip_byte(file, data_offset(file) + 5);
    } else if (damage == "truncated") {  // a copy that stopped short
      fs::resize_file(file, fs::file_size(file) * 3 / 4);
    } else if (damage == "manifest") {
      flip_byte_at_fraction((fs::path(dir) / "MANIFEST").string(), 0.3);
    } else if (damage == "missing") {
      fs::remove(file);
    } else {  // an intact file of the same step but other data: its index and CRCs tell
      fs::remove(file);
      write_rank_file(dir, snapshot_of(full_state(20, 2, 99), 1, 2));
    }
    const Verdict v = judged(dir);
    CHECK(!v.ok);
    CHECK(!v.unusable);
    if (damage == "manifest") {
      CHECK(v.reason.find("MANIFEST fails its CRC-32C") != std::string::npos);
    } else {
      CHECK(v.reason.find("rank-00001-of-00002.h5") != std::string::npos);
    }
    if (damage == "slices")  // the slice, by tensor and box
      CHECK_MESSAGE(
          v.reason.find("slice model/wte [20:37, 0:11] fails its CRC-32C") != std::string::npos,
          v.reason);
    std::vector<std::string> warnings;
    CHECK(latest_good_checkpoint(tmp.str(), &warnings) == old_dir);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("falling back to " + old_dir) != std::string::npos);
  }
}

TEST_CASE("a non-finite value written behind the checksums makes a folder unusable") {
  // What a writer without the finiteness rule would leave: the file and the manifest agree.
  TempDir tmp;
  const CheckpointData older = full_state(10, 1, 4);
  const std::string old_dir = save_all(tmp.str(), older);
  const CheckpointData d = full_state(20, 2, 5);
  const std::string dir = checkpoint_path(tmp.str(), 20);
  RankSnapshot bad = snapshot_of(d, 1, 2);
  bad.data[bad.data.size() - 3] = std::numeric_limits<float>::quiet_NaN();
  write_rank_file(dir, bad);  // no finiteness check below the Checkpointer
  write_rank_file(dir, snapshot_of(d, 0, 2));
  commit_folder(dir, 20, 2, 1.0);
  const Verdict v = judged(dir);
  CHECK(!v.ok);
  CHECK(v.unusable);
  CHECK_MESSAGE(v.reason.find("optimizer/v/ln_f.scale [") != std::string::npos, v.reason);
  CHECK(v.reason.find("1 non-finite value") != std::string::npos);
  std::vector<std::string> warnings;
  CHECK(latest_good_checkpoint(tmp.str(), &warnings) == old_dir);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find(dir + " is not usable") != std::string::npos);
  // A resume reads what its layout needs: the weights are fine, the moments are not.
  StateBuffer w(441);
  read_flat_state(*open_checkpoint(dir, nullptr), "model", d.params, {0, 441}, w.data());
  StateBuffer v2(441);
  CHECK_THROWS_WITH_AS(
      read_flat_state(*open_checkpoint(dir, nullptr), "optimizer/v", d.params, {0, 441}, v2.data()),
      doctest::Contains("not usable"), CheckpointError);
}

TEST_CASE("describe_checkpoint lists a folder's files and tensors, and its verdict") {
  TempDir tmp;
  const std::string dir = save_all(tmp.str(), full_state(40, 2, 1));
  const std::string text = describe_checkpoint(dir);
  CHECK_MESSAGE(text.find("step: 40") != std::string::npos, text);
  CHECK(text.find("world_size: 2") != std::string::npos);
  CHECK(text.find("parameters: 435 in 3 tensors, optimizer moments: yes") != std::string::npos);
  CHECK(text.find("rank-00001-of-00002.h5:") != std::string::npos);
  CHECK(text.find("model/wte [37, 11] in 2 slices") != std::string::npos);
  CHECK(text.find("optimizer/v/ln_f.scale [5, 3] in 1 slice\n") != std::string::npos);
  CHECK(text.find("verdict: OK") != std::string::npos);
  flip_byte(rank_file(dir, 0, 2), data_offset(rank_file(dir, 0, 2)) + 8);
  CHECK(describe_checkpoint(dir).find("verdict: DAMAGED") != std::string::npos);
}

TEST_CASE("the Checkpointer writes each rank's file, commits on rank 0 and prunes folders") {
  for (bool async : {false, true}) {
    CAPTURE(async);
    TempDir tmp;
    // Unfinished saves: one of ours (a lone rank file), and a folder holding a stranger's file.
    const CheckpointData early = full_state(6, 2, 6);
    write_rank_file(checkpoint_path(tmp.str(), 6), snapshot_of(early, 0, 2));
    fs::create_directories(checkpoint_path(tmp.str(), 5));
    std::ofstream(fs::path(checkpoint_path(tmp.str(), 5)) / "notes.txt") << "mine\n";
    // A stranger's folder that happens to hold a file named MANIFEST: listed, never verifies,
    // and still not ours to delete.
    fs::create_directories(checkpoint_path(tmp.str(), 4));
    std::ofstream(fs::path(checkpoint_path(tmp.str(), 4)) / "MANIFEST") << "my own list\n";
    std::ofstream(fs::path(checkpoint_path(tmp.str(), 4)) / "notes.txt") << "mine\n";
    // And an unfinished one newer than any: kept (it may be a save under way).
    const CheckpointData late = full_state(40, 2, 6);
    write_rank_file(checkpoint_path(tmp.str(), 40), snapshot_of(late, 1, 2));
    Checkpointer r0(tmp.str(), 2, async, 0), r1(tmp.str(), 2, async, 1);
    CHECK(r1.reuse().data.empty());  // nothing written yet
    const float* buffer = nullptr;
    for (int64_t step : {10, 20, 30}) {
      const CheckpointData d = full_state(step, 2, static_cast<uint32_t>(step));
      RankSnapshot s1 = snapshot_of(d, 1, 2);
      buffer = s1.data.data();
      r1.save(std::move(s1));
      r0.save(snapshot_of(d, 0, 2));
      r1.wait();
      if (!async) r0.commit(step, 2);
      r0.wait();
      check_same_tensors(read_checkpoint(checkpoint_path(tmp.str(), step)), d, 2);
    }
    CHECK(list_checkpoints(tmp.str()) == std::vector<std::string>{checkpoint_path(tmp.str(), 30),
                                                                  checkpoint_path(tmp.str(), 20),
                                                                  checkpoint_path(tmp.str(), 4)});
    CHECK(!fs::exists(checkpoint_path(tmp.str(), 10)));
    CHECK(!fs::exists(checkpoint_path(tmp.str(), 6)));  // never resumable: pruned
    CHECK(fs::exists(fs::path(checkpoint_path(tmp.str(), 5)) / "notes.txt"));  // not ours
    CHECK(fs::exists(fs::path(checkpoint_path(tmp.str(), 4)) / "notes.txt"));  // nor this
    CHECK(fs::exists(rank_file(checkpoint_path(tmp.str(), 40), 1, 2)));  // newer than any kept
    CHECK(temp_files(tmp.str()).empty());
    // The last snapshot's buffer comes back for the next one (the very allocation), once.
    RankSnapshot again = r1.reuse();
    CHECK(again.data.data() == buffer);
    CHECK(again.data.size() == snapshot_of(full_state(30, 2, 30), 1, 2).data.size());
    CHECK(r1.reuse().data.empty());
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
  // Files of ~315K floats: data sets page-aligned (>= 64 KiB) with a tail that is not a whole
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
  check_same_tensors(read_checkpoint(dir), d, 2);
  flip_byte_at_fraction(rank_file(dir, 0, 2), 0.4);  // inside the prefix
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
