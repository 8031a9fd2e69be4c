// Checkpoint write and read-back throughput for a GPT-2-small-sized state (124M parameters:
// weights + two AdamW moments, ~1.5 GB) against dd writing and reading the same bytes in the
// same run. Figures only; nothing is asserted.
//
//   build/bench/bench_checkpoint [DIR] [REPS]      (DIR defaults to /tmp; needs ~3.5 GB free)
//
// Reads are made cold for this file only (fsync, then posix_fadvise DONTNEED), so the page cache
// of the rest of the machine is left alone.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "trainrun/checkpoint.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

// GPT-2 small as trainrun's GPT declares it (vocab 50304, context 1024, 12 x 768, tied head).
std::vector<ParamEntry> gpt2_small_params() {
  const int64_t V = 50304, T = 1024, C = 768, L = 12;
  std::vector<ParamEntry> p;
  int64_t off = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    p.push_back({std::move(name), std::move(shape), off});
    off += n;
  };
  add("wte.weight", {V, C});
  add("wpe.weight", {T, C});
  for (int64_t l = 0; l < L; ++l) {
    const std::string b = "blocks." + std::to_string(l);
    add(b + ".ln1.weight", {C});
    add(b + ".ln1.bias", {C});
    add(b + ".attn.qkv.weight", {3 * C, C});
    add(b + ".attn.qkv.bias", {3 * C});
    add(b + ".attn.proj.weight", {C, C});
    add(b + ".attn.proj.bias", {C});
    add(b + ".ln2.weight", {C});
    add(b + ".ln2.bias", {C});
    add(b + ".mlp.fc.weight", {4 * C, C});
    add(b + ".mlp.fc.bias", {4 * C});
    add(b + ".mlp.proj.weight", {C, 4 * C});
    add(b + ".mlp.proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return p;
}

int64_t numel(const std::vector<ParamEntry>& p) {
  int64_t n = 1;
  for (int64_t d : p.back().shape) n *= d;
  return p.back().offset + n;
}

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Drops this file's pages from the page cache so the next read comes from the disk.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? argv[1] : "/tmp";
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 2;
  const fs::path ck = dir / fmt::format("trainrun-bench-ckpt-{}.h5", ::getpid());
  const fs::path raw = dir / fmt::format("trainrun-bench-dd-{}.bin", ::getpid());

  CheckpointData data;
  data.params = gpt2_small_params();
  const int64_t n = numel(data.params);
  const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) == 0) {
    const double avail = static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize);
    fmt::print("{}: {:.1f} GB free, need {:.1f} GB (checkpoint + dd file)\n", dir.string(),
               avail / 1e9, 2.3 * bytes / 1e9);
    if (avail < 2.3 * bytes) {
      fmt::print(stderr, "not enough free space in {}: pass another directory\n", dir.string());
      return 1;
    }
  }
  // Non-constant values, so nothing downstream can shortcut zero pages.
  data.weights.resize(static_cast<size_t>(n));
  data.adam_m.resize(static_cast<size_t>(n));
  data.adam_v.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    data.weights[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    data.adam_m[i] = data.weights[i] * 1e-3f;
    data.adam_v[i] = data.weights[i] * data.weights[i] * 1e-6f;
  }
  data.state.step = 1000;
  data.state.config_yaml = "name: bench\n";

  std::vector<double> w_ck, r_ck, w_dd, r_dd;
  bool same = true;
  const int64_t blocks = static_cast<int64_t>(bytes / (16 << 20)) + 1;  // dd: bs=16M
  for (int r = 0; r < reps; ++r) {
    w_ck.push_back(seconds([&] { write_checkpoint(ck.string(), data); }));
    evict(ck.string());
    CheckpointData back;
    r_ck.push_back(seconds([&] { back = read_checkpoint(ck.string()); }));
    same = same && back.weights == data.weights && back.adam_v == data.adam_v;
    fs::remove(ck);

    const std::string dd_w = fmt::format(
        "dd if=/dev/zero of={} bs=16M count={} conv=fsync status=none", raw.string(), blocks);
    w_dd.push_back(seconds([&] {
      if (std::system(dd_w.c_str()) != 0) fmt::print(stderr, "dd write failed\n");
    }));
    evict(raw.string());
    const std::string dd_r = fmt::format("dd if={} of=/dev/null bs=16M status=none", raw.string());
    r_dd.push_back(seconds([&] {
      if (std::system(dd_r.c_str()) != 0) fmt::print(stderr, "dd read failed\n");
    }));
    fs::remove(raw);
  }
  const double dd_bytes = static_cast<double>(blocks) * (16 << 20);

  fmt::print(
      "GPT-2 small state: {} parameters x 3 (weights, adam_m, adam_v) = {:.2f} GB, {} "
      "datasets; median of {}\n",
      n, bytes / 1e9, data.params.size() * 3, reps);
  fmt::print("| operation | seconds | GB/s | vs dd |\n| --- | ---: | ---: | ---: |\n");
  const double ddw = dd_bytes / median(w_dd) / 1e9, ddr = dd_bytes / median(r_dd) / 1e9;
  fmt::print("| write_checkpoint (HDF5, fletcher32, fsync, rename) | {:.2f} | {:.2f} | {:.2f}x |\n",
             median(w_ck), bytes / median(w_ck) / 1e9, bytes / median(w_ck) / 1e9 / ddw);
  fmt::print("| dd if=/dev/zero bs=16M conv=fsync (same size) | {:.2f} | {:.2f} | 1.00x |\n",
             median(w_dd), ddw);
  fmt::print("| read_checkpoint (cold, checksums verified) | {:.2f} | {:.2f} | {:.2f}x |\n",
             median(r_ck), bytes / median(r_ck) / 1e9, bytes / median(r_ck) / 1e9 / ddr);
  fmt::print("| dd of=/dev/null bs=16M (cold, same size) | {:.2f} | {:.2f} | 1.00x |\n",
             median(r_dd), ddr);
  fmt::print("read-back matches what was written: {}\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
