// What the checkpoint concept's unit tests share (test_checkpoint, test_checkpointer,
// test_checkpoint_integrity, test_checkpoint_folder, test_state_dict): small states to save as
// training does (snapshot_of, save_folder) or as a single file (save_direct), byte-level damage,
// HDF5 attribute surgery.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <thread>

#include "../src/checkpoint/non_finite.h"
#include "temp_dir.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/errors.h"

namespace trainrun::checkpoint_test {

using namespace trainrun;
namespace fs = std::filesystem;

using trainrun::testing::TempDir;

// A small model: shapes of several ranks, a padding gap, one tensor over a chunk (1M elements).
inline CheckpointData fake_state(int64_t step, uint32_t seed = 1) {
  CheckpointData d;
  struct P {
    const char* name;
    std::vector<int64_t> shape;
  };
  std::vector<P> ps = {{"wte", {64, 16}},
                       {"blocks.0.attn.qkv.weight", {16, 48}},
                       {"blocks.0.attn.qkv.bias", {48}},
                       {"blocks.3.mlp.fc.weight", {1100, 1000}},
                       {"ln_f.scale", {16}},
                       {"odd.shape", {3, 5, 7}}};
  int64_t off = 0;
  for (const P& p : ps) {
    int64_t n = 1;
    for (int64_t x : p.shape) n *= x;
    d.params.push_back({p.name, p.shape, off});
    off += n + (p.shape.size() == 1 ? 5 : 0);  // a gap after 1-D tensors, like alignment padding
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  auto fill = [&](StateBuffer& v) {
    v.assign(size_t(off), 0.0f);
    for (const ParamEntry& p : d.params) {
      int64_t n = 1;
      for (int64_t x : p.shape) n *= x;
      for (int64_t i = 0; i < n; ++i) v[size_t(p.offset + i)] = normal(rng);
    }
  };
  fill(d.weights);
  fill(d.adam_m);
  fill(d.adam_v);
  // Values a lossy path would change. (Not inf: a checkpoint holds finite values only, see
  // "a non-finite snapshot is never written".)
  d.weights[1] = -0.0f;
  d.weights[2] = std::numeric_limits<float>::denorm_min();
  d.weights[3] = std::numeric_limits<float>::max();
  d.state.step = step;
  d.state.tokens_seen = step * 4096 + 7;
  d.state.samples_seen = step * 8 + 3;
  d.state.seed = 0xfedcba9876543210ull;
  d.state.bad_steps_total = 2;
  d.state.restarts = 1;
  d.state.lr_scale = 0.25;
  d.state.world_size = 4;
  d.state.config_yaml = "model:\n  kind: gpt\n  name: \"x\"\noptimizer:\n  lr: 3.0e-4\n";
  return d;
}

inline bool same_bits(const StateBuffer& a, const StateBuffer& b) {
  // memcmp of empty vectors would pass null pointers (undefined, and UBSan says so).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline void check_equal(const CheckpointData& a, const CheckpointData& b) {
  CHECK(a.state.step == b.state.step);
  CHECK(a.state.tokens_seen == b.state.tokens_seen);
  CHECK(a.state.samples_seen == b.state.samples_seen);
  CHECK(a.state.seed == b.state.seed);
  CHECK(a.state.bad_steps_total == b.state.bad_steps_total);
  CHECK(a.state.restarts == b.state.restarts);
  CHECK(a.state.lr_scale == b.state.lr_scale);
  CHECK(a.state.world_size == b.state.world_size);
  CHECK(a.state.config_yaml == b.state.config_yaml);
  REQUIRE(a.params.size() == b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    CHECK(a.params[i].name == b.params[i].name);
    CHECK(a.params[i].shape == b.params[i].shape);
    CHECK(a.params[i].offset == b.params[i].offset);
  }
  CHECK(same_bits(a.weights, b.weights));
  CHECK(same_bits(a.adam_m, b.adam_m));
  CHECK(same_bits(a.adam_v, b.adam_v));
}

// File offset of the middle of the first chunk of `dataset`.
inline haddr_t middle_of_data(const std::string& file, const char* dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  hid_t space = H5Dget_space(ds);
  haddr_t addr = 0;
  hsize_t size = 0, off[3];
  unsigned mask = 0;
  REQUIRE(H5Dget_chunk_info(ds, space, 0, off, &mask, &addr, &size) >= 0);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);
  return addr + size / 2;
}

// Where `text` first occurs in the file's bytes (REQUIREs that it does): a compact dataset's
// data lives in its object header, which H5Dget_chunk_info cannot locate.
inline uint64_t offset_of_text(const std::string& file, const std::string& text) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(text);
  REQUIRE(at != std::string::npos);
  return at;
}

inline void flip_byte(const std::string& file, uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x5a);
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}

// Temporaries in the run's checkpoints/ and in its checkpoint folders.
inline std::vector<std::string> temp_files(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(run_dir) / "checkpoints", ec))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}

// Writes `d` as a single-file checkpoint (the format `export` writes) into the run's folder.
inline void save_direct(const std::string& run_dir, const CheckpointData& d) {
  fs::create_directories(fs::path(run_dir) / "checkpoints");
  write_checkpoint(single_file_checkpoint_path(run_dir, d.state.step), d);
}

// What rank `rank` of `world` writes of the whole state `d`, as the trainer's components declare
// it (state_dict.h): every tensor by name, and this rank's shard_of share of each flat buffer.
inline RankSnapshot snapshot_of(const CheckpointData& d, int rank = 0, int world = 1) {
  StateDict sd;
  const Shard mine = shard_of(static_cast<int64_t>(d.weights.size()), world, rank);
  auto from = [](const StateBuffer& flat) {
    return [&flat](int64_t at, int64_t n, float* out) {
      std::copy(flat.data() + at, flat.data() + at + n, out);
    };
  };
  add_flat_state(sd, "model", d.params, mine, from(d.weights));
  if (!d.adam_m.empty()) {
    add_flat_state(sd, "optimizer/m", d.params, mine, from(d.adam_m));
    add_flat_state(sd, "optimizer/v", d.params, mine, from(d.adam_v));
  }
  TrainState st = d.state;
  st.world_size = world;
  for (NamedValue& v : values_of(st)) sd.put(std::move(v.name), v.value);
  RankSnapshot s;
  s.config_yaml = d.state.config_yaml;
  s.rank = rank;
  take_snapshot(sd, &s);
  return s;
}

// Saves `d` as training does: one Checkpointer per rank of `world` writes its snapshot_of, then
// rank 0 commits. Returns the checkpoint's folder.
inline std::string save_folder(const std::string& run_dir, const CheckpointData& d, int world = 1,
                               int keep_last = 0) {
  for (int r = world - 1; r >= 0; --r) {
    Checkpointer ck(run_dir, keep_last, false, r);
    ck.save(snapshot_of(d, r, world));
    if (r == 0) ck.commit(d.state.step, world);
  }
  return checkpoint_path(run_dir, d.state.step);
}

inline std::string rank_file(const std::string& dir, int rank, int world) {
  return (fs::path(dir) / fmt::format("rank-{:05d}-of-{:05d}.h5", rank, world)).string();
}

// Where a contiguous data set's bytes start in the file (a rank file's /slices).
inline uint64_t data_offset(const std::string& file, const char* dataset = "/slices") {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const haddr_t at = H5Dget_offset(ds);
  H5Dclose(ds);
  H5Fclose(f);
  REQUIRE(at != HADDR_UNDEF);
  return at;
}

// The elements of tensor `p` in a flat buffer laid out by `params` (by name).
inline std::vector<float> tensor_of(const CheckpointData& d, const StateBuffer& flat,
                                    const std::string& name) {
  for (const ParamEntry& p : d.params)
    if (p.name == name) {
      int64_t n = 1;
      for (int64_t x : p.shape) n *= x;
      return std::vector<float>(flat.begin() + p.offset, flat.begin() + p.offset + n);
    }
  FAIL("no tensor " << name);
  return {};
}

// What a checkpoint folder read back as one state must hold: `want`'s state (the world size as
// saved) and every tensor by name, shape and bits. Its flat layout packs the tensors without
// `want`'s padding, so offsets are not compared.
inline void check_same_tensors(const CheckpointData& got, const CheckpointData& want,
                               int world_size) {
  CHECK(got.state.step == want.state.step);
  CHECK(got.state.tokens_seen == want.state.tokens_seen);
  CHECK(got.state.samples_seen == want.state.samples_seen);
  CHECK(got.state.seed == want.state.seed);
  CHECK(got.state.bad_steps_total == want.state.bad_steps_total);
  CHECK(got.state.restarts == want.state.restarts);
  CHECK(got.state.lr_scale == want.state.lr_scale);
  CHECK(got.state.world_size == world_size);
  CHECK(got.state.config_yaml == want.state.config_yaml);
  REQUIRE(got.params.size() == want.params.size());
  CHECK(got.adam_m.empty() == want.adam_m.empty());
  for (size_t i = 0; i < want.params.size(); ++i) {
    const std::string& name = want.params[i].name;
    CAPTURE(name);
    CHECK(got.params[i].name == name);
    CHECK(got.params[i].shape == want.params[i].shape);
    auto same = [&](const StateBuffer& a, const StateBuffer& b) {
      const std::vector<float> x = tensor_of(got, a, name), y = tensor_of(want, b, name);
      return x.size() == y.size() &&
             (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    };
    CHECK(same(got.weights, want.weights));
    if (!want.adam_m.empty() && !got.adam_m.empty()) {
      CHECK(same(got.adam_m, want.adam_m));
      CHECK(same(got.adam_v, want.adam_v));
    }
  }
}

// --- usable content: finite values, checksummed and sane metadata ----------------------------

// Each verdict agrees with what read_checkpoint does: inspect and resume judge files alike.
inline Verdict judged(const std::string& path) {
  Verdict v = verify_checkpoint(path);
  bool read_ok = true;
  std::string read_error;
  try {
    read_checkpoint(path);
  } catch (const CheckpointError& e) {
    read_ok = false;
    read_error = e.what();
  }
  CHECK(read_ok == v.ok);
  if (!v.ok) {
    CHECK(read_error.find(v.reason) != std::string::npos);
    CHECK(read_error.find(v.problem()) != std::string::npos);
    const std::string verdict = describe_checkpoint(path);
    CHECK(verdict.find(v.unusable ? "verdict: UNUSABLE" : "verdict: DAMAGED") != std::string::npos);
    CHECK(verdict.find(v.reason) != std::string::npos);
  }
  return v;
}

// Overwrites one float of a dataset through HDF5 (so its checksum stays right): a file that an
// older trainrun, without the finiteness rule, could have written.
inline void poke_float(const std::string& file, const char* dataset, hsize_t index, float value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  hid_t space = H5Dget_space(ds);
  int rank = H5Sget_simple_extent_ndims(space);
  const size_t r = static_cast<size_t>(rank);
  std::vector<hsize_t> dims(r, 0), start(r, 0), count(r, 1);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  for (int i = rank; i-- > 0;) {  // row-major index -> coordinates
    start[size_t(i)] = index % dims[size_t(i)];
    index /= dims[size_t(i)];
  }
  REQUIRE(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(),
                              nullptr) >= 0);
  hsize_t one = 1;
  hid_t mem = H5Screate_simple(1, &one, nullptr);
  REQUIRE(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, &value) >= 0);
  H5Sclose(mem);
  H5Sclose(space);
  H5Dclose(ds);
  REQUIRE(H5Fclose(f) >= 0);
}

// Flips one bit of an attribute's stored bytes (numbers and strings alike), as a bad disk or
// memory would; HDF5 keeps no checksum of attributes to notice.
inline void flip_attr_bit(const std::string& file, const char* object, const char* name, int bit) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t o = H5Oopen(f, object, H5P_DEFAULT);
  REQUIRE(o >= 0);
  hid_t a = H5Aopen(o, name, H5P_DEFAULT);
  REQUIRE(a >= 0);
  hid_t type = H5Aget_type(a);
  std::vector<unsigned char> raw(H5Tget_size(type));
  REQUIRE(H5Aread(a, type, raw.data()) >= 0);
  raw[size_t(bit / 8)] ^= static_cast<unsigned char>(1u << (bit % 8));
  REQUIRE(H5Awrite(a, type, raw.data()) >= 0);
  H5Tclose(type);
  H5Aclose(a);
  H5Oclose(o);
  REQUIRE(H5Fclose(f) >= 0);
}

template <typename T>
inline T attr(const std::string& file, const char* name, hid_t type) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  T value{};
  H5Aread(a, type, &value);
  H5Aclose(a);
  H5Fclose(f);
  return value;
}

// What a format 1 file looks like: no /metadata, format_version 1 (otherwise the same layout).
inline void make_format_1(const std::string& file) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  REQUIRE(H5Ldelete(f, "metadata", H5P_DEFAULT) >= 0);
  hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
  int64_t one = 1;
  REQUIRE(H5Awrite(a, H5T_NATIVE_INT64, &one) >= 0);
  H5Aclose(a);
  REQUIRE(H5Fclose(f) >= 0);
}

// Sets a double attribute (lr_scale) to `value`.
inline void set_double_attr(const std::string& file, const char* name, double value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  REQUIRE(H5Awrite(a, H5T_NATIVE_DOUBLE, &value) >= 0);
  H5Aclose(a);
  REQUIRE(H5Fclose(f) >= 0);
}

}  // namespace trainrun::checkpoint_test
