// Checkpoints: bit-exact round trip, visible HDF5 layout, damage detection, fallback to the
// previous good file, pruning, async == sync, and no partial file after a failed or killed write;
// no non-finite value in or out, every root attribute checksummed, absurd values refused, and
// format 1 files still read.
#include <doctest/doctest.h>
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

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

using trainrun::testing::TempDir;

// A small model: shapes of several ranks, a padding gap, one tensor over a chunk (1M elements).
CheckpointData fake_state(int64_t step, uint32_t seed = 1) {
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

bool same_bits(const StateBuffer& a, const StateBuffer& b) {
  // memcmp of empty vectors would pass null pointers (undefined, and UBSan says so).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void check_equal(const CheckpointData& a, const CheckpointData& b) {
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
haddr_t middle_of_data(const std::string& file, const char* dataset) {
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

void flip_byte(const std::string& file, uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x5a);
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}

std::vector<std::string> temp_files(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}

void save_direct(const std::string& run_dir, const CheckpointData& d) {
  fs::create_directories(fs::path(run_dir) / "checkpoints");
  write_checkpoint(checkpoint_path(run_dir, d.state.step), d);
}

}  // namespace

TEST_CASE("checkpoint round trip is bit-exact") {
  TempDir dir;
  CheckpointData d = fake_state(42);
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, d);
  CHECK(fs::exists(path));
  CHECK(temp_files(dir.str()).empty());
  check_equal(read_checkpoint(path), d);
  Verdict v = verify_checkpoint(path);
  CHECK(v.ok);
  CHECK(v.step == 42);

  SUBCASE("without optimizer moments and with an empty config") {
    d.adam_m.clear();
    d.adam_v.clear();
    d.state.config_yaml.clear();
    write_checkpoint(path, d);
    check_equal(read_checkpoint(path), d);
  }
}

TEST_CASE("checkpoint layout is visible to HDF5 tools") {
  TempDir dir;
  CheckpointData d = fake_state(7);
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, d);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  for (const char* attr :
       {"format_version", "trainrun_version", "step", "tokens_seen", "samples_seen", "seed",
        "bad_steps_total", "restarts", "lr_scale", "world_size", "created"})
    CHECK_MESSAGE(H5Aexists(f, attr) > 0, attr);
  for (const ParamEntry& p : d.params)
    for (std::string g : {"/model/", "/optimizer/m/", "/optimizer/v/"}) {
      std::string name = g + p.name;
      CHECK_MESSAGE(H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0, name);
    }
  CHECK(H5Lexists(f, "/config", H5P_DEFAULT) > 0);

  hid_t ds = H5Dopen2(f, "/model/blocks.3.mlp.fc.weight", H5P_DEFAULT);
  REQUIRE(ds >= 0);
  hid_t space = H5Dget_space(ds);
  hsize_t dims[2];
  REQUIRE(H5Sget_simple_extent_ndims(space) == 2);
  H5Sget_simple_extent_dims(space, dims, nullptr);
  CHECK(dims[0] == 1100);
  CHECK(dims[1] == 1000);
  hid_t dcpl = H5Dget_create_plist(ds);
  CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED);
  hsize_t chunk[2];
  REQUIRE(H5Pget_chunk(dcpl, 2, chunk) == 2);
  CHECK(chunk[0] <= dims[0]);
  CHECK(chunk[1] <= dims[1]);
  CHECK(chunk[0] * chunk[1] <= (1u << 20));
  CHECK(chunk[0] < dims[0]);  // more than one chunk: the 1M-element cap applies
  unsigned flags = 0;
  size_t nelmts = 0;
  CHECK(H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelmts, nullptr, 0, nullptr,
                             nullptr) >= 0);
  hid_t a = H5Aopen(ds, "offset", H5P_DEFAULT);
  REQUIRE(a >= 0);
  int64_t off = -1;
  H5Aread(a, H5T_NATIVE_INT64, &off);
  CHECK(off == d.params[3].offset);
  H5Aclose(a);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);

  std::string text = describe_checkpoint(path);
  CHECK(text.find("/model/blocks.3.mlp.fc.weight [1100, 1000]") != std::string::npos);
  CHECK(text.find("step: 7") != std::string::npos);
  CHECK(text.find("verdict: OK") != std::string::npos);
}

TEST_CASE("a flipped byte or a truncated file is reported as damage") {
  TempDir dir;
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(5));

  SUBCASE("flipped byte in a dataset's data") {
    flip_byte(path, middle_of_data(path, "/optimizer/v/blocks.3.mlp.fc.weight"));
  }
  SUBCASE("truncated") {
    fs::resize_file(path, fs::file_size(path) / 2);
  }

  try {
    read_checkpoint(path);
    FAIL("a damaged checkpoint was read");
  } catch (const CheckpointError& e) {
    std::string msg = e.what();
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("damaged") != std::string::npos);
    CHECK(e.code() == kExitCheckpoint);
  }
  Verdict v = verify_checkpoint(path);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.reason.empty());
  CHECK(describe_checkpoint(path).find("verdict: DAMAGED") != std::string::npos);
}

TEST_CASE("the checksum names the damage") {
  TempDir dir;
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(5));
  flip_byte(path, middle_of_data(path, "/model/wte"));
  Verdict v = verify_checkpoint(path);
  CHECK_FALSE(v.ok);
  CHECK(v.reason.find("Fletcher32") != std::string::npos);
}

TEST_CASE("latest_good_checkpoint falls back past damaged files") {
  TempDir dir;
  std::vector<std::string> warnings;
  CHECK_FALSE(latest_good_checkpoint(dir.str(), &warnings).has_value());

  for (int64_t s : {10, 20, 30}) save_direct(dir.str(), fake_state(s));
  std::vector<std::string> all = list_checkpoints(dir.str());
  REQUIRE(all.size() == 3);
  CHECK(all[0] == checkpoint_path(dir.str(), 30));
  CHECK(all[2] == checkpoint_path(dir.str(), 10));
  CHECK(fs::path(all[0]).filename() == "step-0000030.h5");

  auto good = latest_good_checkpoint(dir.str(), &warnings);
  REQUIRE(good);
  CHECK(*good == all[0]);
  CHECK(warnings.empty());

  fs::resize_file(all[0], 1000);
  flip_byte(all[1], middle_of_data(all[1], "/model/wte"));
  good = latest_good_checkpoint(dir.str(), &warnings);
  REQUIRE(good);
  CHECK(*good == all[2]);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].find(all[0]) != std::string::npos);
  CHECK(warnings[0].find("falling back to " + all[2]) != std::string::npos);
  CHECK(warnings[1].find(all[1]) != std::string::npos);

  fs::resize_file(all[2], 10);
  warnings.clear();
  CHECK_FALSE(latest_good_checkpoint(dir.str(), &warnings).has_value());
  CHECK(warnings.size() == 3);
}

TEST_CASE("Checkpointer keeps the newest keep_last good checkpoints") {
  TempDir dir;
  Checkpointer ck(dir.str(), 2, false);
  for (int64_t s : {1, 2, 3}) ck.save(fake_state(s));
  CHECK(list_checkpoints(dir.str()) ==
        std::vector<std::string>{checkpoint_path(dir.str(), 3), checkpoint_path(dir.str(), 2)});
  // A damaged file does not count towards keep_last: step 2 stays, damaged step 3 goes.
  std::string p3 = checkpoint_path(dir.str(), 3);
  flip_byte(p3, middle_of_data(p3, "/model/wte"));
  ck.save(fake_state(4));
  CHECK(list_checkpoints(dir.str()) ==
        std::vector<std::string>{checkpoint_path(dir.str(), 4), checkpoint_path(dir.str(), 2)});
}

TEST_CASE("async save then wait gives the same checkpoints as sync") {
  TempDir a, b;
  {
    Checkpointer sync(a.str(), 3, false);
    Checkpointer async(b.str(), 3, true);
    for (int64_t s : {100, 200}) {
      CHECK(sync.save(fake_state(s, uint32_t(s))) >= 0.0);
      CHECK(async.save(fake_state(s, uint32_t(s))) >= 0.0);
    }
    async.wait();
  }
  for (int64_t s : {100, 200}) {
    CheckpointData x = read_checkpoint(checkpoint_path(a.str(), s));
    CheckpointData y = read_checkpoint(checkpoint_path(b.str(), s));
    check_equal(x, y);
    check_equal(y, fake_state(s, uint32_t(s)));
  }
  CHECK(temp_files(b.str()).empty());
}

TEST_CASE("async background errors surface in wait()") {
  TempDir dir;
  fs::create_directories(dir.path / "checkpoints");
  // A directory where the checkpoint file should go: the final rename fails.
  fs::create_directories(checkpoint_path(dir.str(), 1) + "/blocker");
  Checkpointer ck(dir.str(), 2, true);
  ck.save(fake_state(1));
  CHECK_THROWS_AS(ck.wait(), CheckpointError);
  ck.wait();  // the error was reported once
  CHECK(temp_files(dir.str()).empty());
}

TEST_CASE("a write that cannot happen throws and leaves the previous checkpoint intact") {
  TempDir dir;
  save_direct(dir.str(), fake_state(1));
  std::string prev = checkpoint_path(dir.str(), 1);
  auto before = fs::file_size(prev);

  SUBCASE("target under a regular file") {
    std::string bad = prev + "/step-0000002.h5";
    CHECK_THROWS_AS(write_checkpoint(bad, fake_state(2)), CheckpointError);
  }
  SUBCASE("disk full (file size limit) while overwriting and while saving") {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      signal(SIGXFSZ, SIG_IGN);  // writes past the limit then fail with EFBIG instead
      rlimit lim{1 << 20, 1 << 20};
      setrlimit(RLIMIT_FSIZE, &lim);
      int rc = 0;
      try {
        write_checkpoint(prev, fake_state(2));
        rc |= 1;
      } catch (const CheckpointError&) {
      }
      try {
        Checkpointer ck(dir.str(), 1, false);
        ck.save(fake_state(3));
        rc |= 2;
      } catch (const CheckpointError&) {
      }
      _exit(rc);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_FALSE(fs::exists(checkpoint_path(dir.str(), 3)));
  }
  CHECK(fs::file_size(prev) == before);
  check_equal(read_checkpoint(prev), fake_state(1));
  CHECK(temp_files(dir.str()).empty());
}

TEST_CASE("a checkpoint without room is a write error (exit 74) before HDF5 writes a byte") {
  TempDir dir;
  save_direct(dir.str(), fake_state(1));
  const std::string prev = checkpoint_path(dir.str(), 1);
  const auto before = fs::file_size(prev);
  // The reservation is trimmed away when HDF5 closes the file: it is no larger than the data
  // and HDF5's own bytes need.
  save_direct(dir.str(), fake_state(2));
  CHECK(fs::file_size(checkpoint_path(dir.str(), 2)) == before);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{before / 2, before / 2};  // room for half a checkpoint
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = 1;
    try {
      write_checkpoint(checkpoint_path(dir.str(), 3), fake_state(3));
    } catch (const CheckpointWriteError& e) {
      const std::string what = e.what();
      rc = e.code() == kExitWrite && what.find("MiB needed") != std::string::npos ? 0 : 2;
    } catch (...) {
      rc = 3;
    }
    // HDF5 never opened the file, so it holds no half-closed one that would crash its shutdown.
    if (rc == 0 && H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) != 0) rc = 4;
    _exit(rc);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(checkpoint_path(dir.str(), 3)));
  CHECK(temp_files(dir.str()).empty());
}

TEST_CASE("SIGKILL during a write never leaves a bad file at the target") {
  TempDir dir;
  save_direct(dir.str(), fake_state(1));
  const std::string prev = checkpoint_path(dir.str(), 1);
  const std::string target = checkpoint_path(dir.str(), 2);
  // About 63 MB: one 5M-element tensor (over the 16 MiB slab size, so several H5Dwrites) in
  // weights and both moments.
  const int64_t n = int64_t(5) << 20;

  for (int delay_ms : {0, 5, 20, 60, -1}) {  // -1: let it finish
    CAPTURE(delay_ms);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      CheckpointData d;
      d.state.step = 2;
      d.params = {{"big", {4, n / 4}, 0}};
      d.weights.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) d.weights[size_t(i)] = float(i % 1000);
      d.adam_m = d.weights;
      d.adam_v = d.weights;
      char c = 1;
      if (write(fds[1], &c, 1) != 1) _exit(3);
      try {
        write_checkpoint(target, d);
      } catch (...) {
        _exit(2);
      }
      _exit(0);
    }
    close(fds[1]);
    char c = 0;
    REQUIRE(read(fds[0], &c, 1) == 1);
    close(fds[0]);
    int status = 0;
    if (delay_ms >= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      kill(pid, SIGKILL);
      REQUIRE(waitpid(pid, &status, 0) == pid);
    } else {
      REQUIRE(waitpid(pid, &status, 0) == pid);
      REQUIRE(WIFEXITED(status));
      REQUIRE(WEXITSTATUS(status) == 0);
      CheckpointData back = read_checkpoint(target);
      REQUIRE(back.weights.size() == size_t(n));
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) wrong += back.weights[size_t(i)] != float(i % 1000);
      CHECK(wrong == 0);
      CHECK(same_bits(back.adam_v, back.weights));
      CHECK(back.params[0].shape == std::vector<int64_t>{4, n / 4});
    }
    CHECK(verify_checkpoint(prev).ok);
    if (fs::exists(target)) CHECK(verify_checkpoint(target).ok);
    std::vector<std::string> warnings;
    auto good = latest_good_checkpoint(dir.str(), &warnings);
    REQUIRE(good);
    CHECK(verify_checkpoint(*good).ok);
    CHECK(warnings.empty());
    CHECK(temp_files(dir.str()).empty());  // the dead writer's temp file was cleaned up
    fs::remove(target);
  }
}

// --- usable content: finite values, checksummed and sane metadata ----------------------------

namespace {

// Each verdict agrees with what read_checkpoint does: inspect and resume judge files alike.
Verdict judged(const std::string& path) {
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
void poke_float(const std::string& file, const char* dataset, hsize_t index, float value) {
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
void flip_attr_bit(const std::string& file, const char* object, const char* name, int bit) {
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
T attr(const std::string& file, const char* name, hid_t type) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  T value{};
  H5Aread(a, type, &value);
  H5Aclose(a);
  H5Fclose(f);
  return value;
}

// What a format 1 file looks like: no /metadata, format_version 1 (otherwise the same layout).
void make_format_1(const std::string& file) {
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
void set_double_attr(const std::string& file, const char* name, double value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  REQUIRE(H5Awrite(a, H5T_NATIVE_DOUBLE, &value) >= 0);
  H5Aclose(a);
  REQUIRE(H5Fclose(f) >= 0);
}

}  // namespace

TEST_CASE("a non-finite snapshot is never written") {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (int buffer : {0, 1, 2}) {
      CAPTURE(bad);
      CAPTURE(buffer);
      CheckpointData d = fake_state(3);
      StateBuffer& flat = buffer == 0 ? d.weights : buffer == 1 ? d.adam_m : d.adam_v;
      const ParamEntry& fc = d.params[3];  // blocks.3.mlp.fc.weight, over one chunk
      flat[size_t(fc.offset + 1234)] = bad;
      flat[size_t(fc.offset + 999999)] = bad;
      const std::string group = buffer == 0 ? "model" : buffer == 1 ? "optimizer/m" : "optimizer/v";

      const std::string why = non_finite_reason(d);
      CHECK(why.find(group + "/blocks.3.mlp.fc.weight") != std::string::npos);
      CHECK(why.find("2 non-finite values") != std::string::npos);
      CHECK(why.find("element 1234") != std::string::npos);

      TempDir dir;
      const std::string path = (dir.path / "c.h5").string();
      try {
        write_checkpoint(path, d);
        FAIL("a non-finite snapshot was written");
      } catch (const NonFiniteCheckpoint& e) {
        CHECK(e.code() == kExitCheckpoint);
        CHECK(std::string(e.what()).find(why) != std::string::npos);
      }
      CHECK_FALSE(fs::exists(path));

      // The Checkpointer refuses in the caller's thread, sync or async, and prunes nothing:
      // the previous checkpoint stays the newest.
      for (bool async : {false, true}) {
        TempDir run;
        Checkpointer ck(run.str(), 1, async);
        ck.save(fake_state(1));
        ck.wait();
        CHECK_THROWS_AS(ck.save(CheckpointData(d)), NonFiniteCheckpoint);
        ck.wait();
        CHECK(list_checkpoints(run.str()) ==
              std::vector<std::string>{checkpoint_path(run.str(), 1)});
        CHECK(temp_files(run.str()).empty());
      }
    }
  CHECK(non_finite_reason(fake_state(3)).empty());
}

TEST_CASE("find_non_finite counts NaN and infinities, nothing else") {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          1e-30f};
  CHECK_FALSE(find_non_finite(v.data(), v.size()).has_value());
  CHECK_FALSE(find_non_finite(nullptr, 0).has_value());
  uint32_t payload_nan = 0x7fc01234u;  // a NaN with a payload, and a negative one
  float f;
  std::memcpy(&f, &payload_nan, 4);
  v.push_back(f);
  v.push_back(-std::numeric_limits<float>::quiet_NaN());
  v.push_back(-std::numeric_limits<float>::infinity());
  auto nf = find_non_finite(v.data(), v.size());
  REQUIRE(nf.has_value());
  CHECK(nf->count == 3);
  CHECK(nf->first == 6);
  CHECK(std::isnan(nf->value));
}

TEST_CASE("a file holding a non-finite value is unusable, and fallback skips it") {
  for (const char* dataset :
       {"/model/wte", "/optimizer/m/odd.shape", "/optimizer/v/blocks.3.mlp.fc.weight"}) {
    CAPTURE(dataset);
    TempDir dir;
    for (int64_t s : {10, 20}) save_direct(dir.str(), fake_state(s));
    const std::string newest = checkpoint_path(dir.str(), 20);
    poke_float(newest, dataset, 77, std::numeric_limits<float>::infinity());

    Verdict v = judged(newest);
    CHECK_FALSE(v.ok);
    CHECK(v.unusable);
    CHECK(v.reason.find(std::string(dataset).substr(1) + " holds 1 non-finite value") !=
          std::string::npos);
    CHECK(v.reason.find("element 77, is inf") != std::string::npos);

    std::vector<std::string> warnings;
    auto good = latest_good_checkpoint(dir.str(), &warnings);
    REQUIRE(good);
    CHECK(*good == checkpoint_path(dir.str(), 10));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(newest + " is not usable") != std::string::npos);
    CHECK(warnings[0].find("falling back to " + *good) != std::string::npos);
  }
}

TEST_CASE("a flipped bit in any root attribute is detected") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  struct Case {
    const char* name;
    int bit;
  };
  // lr_scale 1.0: bit 62 makes it inf (the learning rate with it), bit 52 a plausible 0.5.
  for (const Case& c :
       {Case{"lr_scale", 62}, Case{"lr_scale", 52}, Case{"lr_scale", 0}, Case{"step", 0},
        Case{"step", 63}, Case{"tokens_seen", 5}, Case{"samples_seen", 1}, Case{"seed", 17},
        Case{"bad_steps_total", 2}, Case{"restarts", 0}, Case{"world_size", 33},
        Case{"world_size", 1}, Case{"flat_size", 3}, Case{"param_count", 0}, Case{"created", 0},
        Case{"trainrun_version", 1}}) {
    CAPTURE(c.name);
    CAPTURE(c.bit);
    CheckpointData d = fake_state(9);
    d.state.lr_scale = 1.0;
    write_checkpoint(path, d);
    REQUIRE(judged(path).ok);
    flip_attr_bit(path, "/", c.name, c.bit);
    if (std::string(c.name) == "lr_scale" && c.bit == 62)
      CHECK(std::isinf(attr<double>(path, "lr_scale", H5T_NATIVE_DOUBLE)));

    Verdict v = judged(path);
    CHECK_FALSE(v.ok);
    CHECK_FALSE(v.unusable);  // damage, not a bad value written on purpose
    CHECK(!v.reason.empty());
    // Most flips reach the metadata comparison, which names the attribute; a few are caught
    // earlier by the layout checks (a changed flat_size or param_count).
    if (v.reason.find("checksummed copy") != std::string::npos)
      CHECK(v.reason.find(std::string("`") + c.name + "=") != std::string::npos);
    else
      CHECK((std::string(c.name) == "flat_size" || std::string(c.name) == "param_count"));
    CHECK_FALSE(describe_checkpoint(path).find("verdict: OK") != std::string::npos);
  }
}

TEST_CASE("a flipped bit in the stored bytes of an attribute fails HDF5's own checksum") {
  // Damage on disk, below HDF5: the object header's checksum (file format 1.10) catches it
  // before the /metadata comparison could.
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  CheckpointData d = fake_state(9);
  d.state.lr_scale = 1.0;
  write_checkpoint(path, d);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t name = bytes.find("lr_scale");
  REQUIRE(name != std::string::npos);
  const double one = 1.0;
  const size_t value = bytes.find(std::string(reinterpret_cast<const char*>(&one), 8), name);
  REQUIRE(value != std::string::npos);
  REQUIRE(value - name < 256);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(value + 7));
  f.put(char(0x3f ^ 0x40));  // 1.0 -> inf
  f.close();
  // HDF5 1.10 leaks a few hundred bytes inside the library after an object header fails its
  // checksum (nothing of ours is open then). The verdict is taken in a child process that ends
  // with _exit, so LeakSanitizer, which checks at exit(), still watches every other test.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const Verdict c = verify_checkpoint(path);
    const std::string msg = std::string(c.ok ? "1" : "0") + (c.unusable ? "1" : "0") + c.reason;
    const ssize_t wrote = ::write(fds[1], msg.data(), msg.size());
    ::_exit(wrote == static_cast<ssize_t>(msg.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  REQUIRE(msg.size() >= 2);
  Verdict v;
  v.ok = msg[0] == '1';
  v.unusable = msg[1] == '1';
  v.reason = msg.substr(2);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.unusable);
  CHECK_MESSAGE(v.reason.find("checksum") != std::string::npos, v.reason);
}

TEST_CASE("the parameter table and the format version are covered too") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(4));
  std::string expect;

  SUBCASE("a renamed tensor (in all three groups, so the layouts still agree)") {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    for (std::string g : {"/model/", "/optimizer/m/", "/optimizer/v/"})
      REQUIRE(H5Lmove(f, (g + "wte").c_str(), f, (g + "wtf").c_str(), H5P_DEFAULT, H5P_DEFAULT) >=
              0);
    H5Fclose(f);
    expect = "param=wtf";
  }
  SUBCASE("a changed offset (in all three groups)") {
    for (const char* g :
         {"/model/ln_f.scale", "/optimizer/m/ln_f.scale", "/optimizer/v/ln_f.scale"})
      flip_attr_bit(path, g, "offset", 1);  // +2: into the padding after it, no overlap
    expect = "param=ln_f.scale offset=";
  }
  SUBCASE("a flipped byte inside /metadata itself") {
    flip_byte(path, middle_of_data(path, "/metadata"));
    expect = "Fletcher32";
  }
  SUBCASE("/metadata removed from a format 2 file") {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(H5Ldelete(f, "metadata", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect = "/metadata is missing";
  }
  SUBCASE("format_version 2 -> 3") {
    flip_attr_bit(path, "/", "format_version", 0);
    expect = "not supported";
  }
  SUBCASE("format_version 2 -> 0") {
    flip_attr_bit(path, "/", "format_version", 1);
    expect = "not supported";
  }
  Verdict v = judged(path);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.unusable);
  CHECK_MESSAGE(v.reason.find(expect) != std::string::npos, v.reason);
}

TEST_CASE("a format 1 file still loads, with a caveat; its absurd values are refused") {
  TempDir dir;
  for (int64_t s : {1, 2}) save_direct(dir.str(), fake_state(s));
  const std::string path = checkpoint_path(dir.str(), 2);
  make_format_1(path);

  Verdict v = judged(path);
  REQUIRE(v.ok);
  CHECK(v.note.find("format 1") != std::string::npos);
  check_equal(read_checkpoint(path), fake_state(2));
  const std::string text = describe_checkpoint(path);
  CHECK(text.find("metadata checksum: none (format 1") != std::string::npos);
  CHECK(text.find("verdict: OK (format 1") != std::string::npos);
  std::vector<std::string> warnings;
  CHECK(latest_good_checkpoint(dir.str(), &warnings) == path);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("format 1") != std::string::npos);

  // Without a checksum the values themselves are judged: what no run produces is refused.
  struct Case {
    double lr_scale;
    const char* says;
  };
  for (const Case& c :
       {Case{std::numeric_limits<double>::infinity(), "lr_scale is inf"},
        Case{std::numeric_limits<double>::quiet_NaN(), "lr_scale is nan"},
        Case{0.0, "lr_scale is 0"}, Case{-0.5, "lr_scale is -0.5"}, Case{4.0, "lr_scale is 4"}}) {
    CAPTURE(c.says);
    set_double_attr(path, "lr_scale", c.lr_scale);
    v = judged(path);
    CHECK_FALSE(v.ok);
    CHECK(v.unusable);
    CHECK_MESSAGE(v.reason.find(c.says) != std::string::npos, v.reason);
    warnings.clear();
    CHECK(latest_good_checkpoint(dir.str(), &warnings) == checkpoint_path(dir.str(), 1));
  }
}

TEST_CASE("a format 1 file with a negative step or no ranks is refused") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  for (const char* name : {"step", "samples_seen", "world_size"}) {
    CAPTURE(name);
    write_checkpoint(path, fake_state(6));
    make_format_1(path);
    flip_attr_bit(path, "/", name, 63);  // the sign bit of the int64
    Verdict v = judged(path);
    CHECK_FALSE(v.ok);
    CHECK(v.unusable);
    CHECK(v.reason.find(name) != std::string::npos);
  }
}

TEST_CASE("absurd training state is refused at write time") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  CheckpointData d = fake_state(5);
  SUBCASE("lr_scale inf") {
    d.state.lr_scale = std::numeric_limits<double>::infinity();
  }
  SUBCASE("lr_scale 0") {
    d.state.lr_scale = 0;
  }
  SUBCASE("lr_scale above 1") {
    d.state.lr_scale = 1.5;
  }
  SUBCASE("negative step") {
    d.state.step = -1;
  }
  SUBCASE("negative tokens_seen") {
    d.state.tokens_seen = -7;
  }
  SUBCASE("no ranks") {
    d.state.world_size = 0;
  }
  try {
    write_checkpoint(path, d);
    FAIL("an absurd state was written");
  } catch (const NonFiniteCheckpoint&) {
    FAIL("not a non-finite value");
  } catch (const CheckpointError& e) {
    CHECK(std::string(e.what()).find("cannot write checkpoint") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("format 2 files carry a readable, checksummed /metadata") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(8));
  CHECK(attr<int64_t>(path, "format_version", H5T_NATIVE_INT64) == kCheckpointFormatVersion);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = H5Dopen2(f, "/metadata", H5P_DEFAULT);
  REQUIRE(ds >= 0);
  hid_t dcpl = H5Dget_create_plist(ds);
  unsigned flags = 0;
  size_t nelmts = 0;
  CHECK(H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelmts, nullptr, 0, nullptr,
                             nullptr) >= 0);
  hid_t space = H5Dget_space(ds);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  std::string text(size_t(n), '\0');
  hid_t chr = H5Tcopy(H5T_C_S1);
  H5Tset_size(chr, 1);
  REQUIRE(H5Dread(ds, chr, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0);
  H5Tclose(chr);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Dclose(ds);
  H5Fclose(f);
  for (const char* line : {"step=8\n", "lr_scale=0.25\n", "world_size=4\n",
                           "seed=18364758544493064720\n", "param=blocks.3.mlp.fc.weight offset="})
    CHECK_MESSAGE(text.find(line) != std::string::npos, line);
}

// Checkpointers of one process writing at the same time (a sync save beside an async writer,
// as a test or a tool may do): each file is built from an in-memory HDF5 image, which the core
// driver knows by its name; built per save, two at once found it "already open".
TEST_CASE("checkpoints written from several threads at once all land") {
  std::vector<TempDir> dirs(4);
  std::vector<std::thread> writers;
  std::vector<std::string> errors(dirs.size());
  for (size_t i = 0; i < dirs.size(); ++i)
    writers.emplace_back([&, i] {
      try {
        Checkpointer ck(dirs[i].str(), 0, false);
        for (int64_t s = 1; s <= 8; ++s) ck.save(fake_state(s, uint32_t(i)));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : writers) t.join();
  for (size_t i = 0; i < dirs.size(); ++i) {
    CHECK_MESSAGE(errors[i].empty(), errors[i]);
    CHECK(list_checkpoints(dirs[i].str()).size() == 8);
  }
}

// Last in this file, so it runs after every case above (doctest runs a file's cases in order):
// an HDF5 file left open on some path keeps its inode in HDF5's list of open files, and a later
// checkpoint that happens to get that inode number fails with "unable to truncate a file which
// is already open".
TEST_CASE("no HDF5 file or object is left open by the cases above") {
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) == 0);
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
}
