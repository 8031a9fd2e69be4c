// Checkpoints: bit-exact round trip, visible HDF5 layout, damage detection, fallback to the
// previous good file, pruning, async == sync, and no partial file after a failed or killed write.
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
#include <limits>
#include <random>
#include <thread>

#include "temp_dir.h"
#include "trainrun/checkpoint.h"
#include "trainrun/errors.h"

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
  auto fill = [&](std::vector<float>& v) {
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
  // Values a lossy path would change.
  d.weights[1] = -0.0f;
  d.weights[2] = std::numeric_limits<float>::denorm_min();
  d.weights[3] = std::numeric_limits<float>::infinity();
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

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
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
