// Checkpoint write and read-back throughput, both formats, against dd writing and reading the
// same bytes in the same run: a GPT-2-small-sized state (124M parameters: weights + two AdamW
// moments, ~1.5 GB) and smaller states of its MLP-sized matrices (about 40 and 300 MB). The
// single file is what `export` writes (write_checkpoint/read_checkpoint); the checkpoint folder
// training writes is written by 1 and by 2 "ranks" (threads, each with its own Checkpointer and
// snapshot of its named state, as ranks on one host would), read back whole by read_checkpoint
// and by 2 ranks' restores (open_checkpoint, each reading the weights and its ZeRO-1 shard of the
// moments). Figures only; nothing is asserted.
//
//   build/bench/bench_checkpoint [DIR] [REPS] [SIZES]   (DIR defaults to /tmp; needs ~3.5 GB free)
//
// SIZES picks states, e.g. "300" or "40,gpt2" (default "40,300,gpt2"; numbers are MB).
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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trainrun/checkpoint/checkpoint.h"

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

// A smaller state of GPT-2-small-like blocks ([3072, 768] matrices) reaching `bytes` (weights +
// m + v).
std::vector<ParamEntry> blocks_of(double bytes) {
  std::vector<ParamEntry> out;
  int64_t off = 0;
  while (3.0 * sizeof(float) * static_cast<double>(off) < bytes) {
    out.push_back({"blocks." + std::to_string(out.size()) + ".mlp.fc.weight", {3072, 768}, off});
    off += 3072 * 768;
  }
  return out;
}

CheckpointData state_of(std::vector<ParamEntry> params) {
  CheckpointData data;
  data.params = std::move(params);
  const int64_t n = numel(data.params);
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
  return data;
}

// What rank `rank` of `world` writes, as the trainer's components declare it: every tensor by
// name, the rank's shard_of share of each flat buffer.
RankSnapshot snapshot(const CheckpointData& d, int rank, int world) {
  StateDict sd;
  const Shard mine = shard_of(static_cast<int64_t>(d.weights.size()), world, rank);
  auto from = [](const StateBuffer& flat) {
    return [&flat](int64_t at, int64_t n, float* out) {
      std::copy(flat.data() + at, flat.data() + at + n, out);
    };
  };
  add_flat_state(sd, "model", d.params, mine, from(d.weights));
  add_flat_state(sd, "optimizer/m", d.params, mine, from(d.adam_m));
  add_flat_state(sd, "optimizer/v", d.params, mine, from(d.adam_v));
  TrainState st = d.state;
  st.world_size = world;
  for (NamedValue& v : values_of(st)) sd.put(std::move(v.name), v.value);
  RankSnapshot s;
  s.config_yaml = d.state.config_yaml;
  s.rank = rank;
  take_snapshot(sd, &s);
  return s;
}

// Every rank's Checkpointer writes its file at once (threads, as ranks would), then rank 0
// commits. The snapshots are taken before the clock starts (in training that copy is charged
// to the step, not the write).
double write_folder(const std::string& run_dir, const CheckpointData& d, int world) {
  std::vector<RankSnapshot> parts;
  for (int r = 0; r < world; ++r) parts.push_back(snapshot(d, r, world));
  std::vector<std::unique_ptr<Checkpointer>> cks;
  for (int r = 0; r < world; ++r)
    cks.push_back(std::make_unique<Checkpointer>(run_dir, 0, false, r));
  return seconds([&] {
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back([&, r] { cks[r]->save(std::move(parts[r])); });
    for (auto& t : ranks) t.join();
    cks[0]->commit(d.state.step, world);
  });
}

// Two ranks restoring at once (threads): each opens the checkpoint and reads every weight and
// its ZeRO-1 shard of the moments, as ModelState and DataParallel do. True when every rank got
// exactly the saved values.
bool read_by_two_ranks(const std::string& path, const CheckpointData& d) {
  const int world = 2;
  const int64_t n = static_cast<int64_t>(d.weights.size());
  bool same[world] = {false, false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<StateSource> src = open_checkpoint(path, nullptr);
      const Shard mine = shard_of(n, world, r);
      StateBuffer w(static_cast<size_t>(n)), m(static_cast<size_t>(mine.size())),
          v(static_cast<size_t>(mine.size()));
      read_flat_state(*src, "model", d.params, {0, n}, w.data());
      read_flat_state(*src, "optimizer/m", d.params, mine, m.data());
      read_flat_state(*src, "optimizer/v", d.params, mine, v.data());
      same[r] = w == d.weights && std::equal(m.begin(), m.end(), d.adam_m.begin() + mine.begin) &&
                std::equal(v.begin(), v.end(), d.adam_v.begin() + mine.begin);
    });
  for (auto& t : ranks) t.join();
  return same[0] && same[1];
}

void evict_tree(const fs::path& p) {
  if (fs::is_directory(p))
    for (const auto& e : fs::directory_iterator(p)) evict(e.path().string());
  else
    evict(p.string());
}

// Deletes and waits until the file system is done with it: on a file system mounted with
// `discard` (this VM's ext4) the TRIM of a deleted 1.5 GB file otherwise stalls whatever is
// written next, 5-20 s measured, which would be charged to the next row.
void remove_settled(const fs::path& p) {
  fs::remove_all(p);
  ::sync();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::sync();
}

void write_raw(const fs::path& path, const CheckpointData& d) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (const auto* v : {&d.weights, &d.adam_m, &d.adam_v}) {
    const char* p = reinterpret_cast<const char*>(v->data());
    size_t left = v->size() * sizeof(float);
    while (left > 0) {
      const ssize_t w = ::write(fd, p, std::min<size_t>(left, 16 << 20));
      if (w <= 0) break;
      p += w;
      left -= static_cast<size_t>(w);
    }
  }
  ::fsync(fd);
  ::close(fd);
}

void read_raw(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(16 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

struct Row {
  std::string what;
  std::vector<double> secs;
  bool write;
};

void bench_size(const fs::path& dir, const std::vector<ParamEntry>& params, int reps) {
  const CheckpointData data = state_of(params);
  const int64_t n = static_cast<int64_t>(data.weights.size());
  const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);
  const fs::path run = dir / fmt::format("trainrun-bench-run-{}", ::getpid());
  const fs::path single = dir / fmt::format("trainrun-bench-ckpt-{}.h5", ::getpid());
  const fs::path raw = dir / fmt::format("trainrun-bench-dd-{}.bin", ::getpid());
  const fs::path folder = checkpoint_path(run.string(), data.state.step);
  const int64_t blocks = static_cast<int64_t>(bytes / (16 << 20)) + 1;  // dd: bs=16M
  std::vector<Row> rows = {
      {"write_checkpoint, one file (HDF5, fletcher32, fsync, rename)", {}, 1},
      {"folder, 1 rank (contiguous, CRC-32C, fsync, rename, MANIFEST)", {}, 1},
      {"folder, 2 ranks writing at once", {}, 1},
      {"dd if=/dev/zero bs=16M conv=fsync (same size)", {}, 1},
      {"read_checkpoint, one file (cold, checksums verified)", {}, 0},
      {"read_checkpoint, folder of 2 ranks (cold, CRC-32C verified)", {}, 0},
      {"dd of=/dev/null bs=16M (cold, same size)", {}, 0},
      {"read_checkpoint, folder of 2 ranks (warm: CPU cost only)", {}, 0},
      {"write(2) of the same bytes, 16 MiB calls, fsync", {}, 1},
      {"read(2) of that file, 16 MiB calls (cold)", {}, 0},
      {"2 ranks restore at once: weights + ZeRO-1 moments each (cold)", {}, 0}};
  bool same = true;
  for (int r = 0; r < reps; ++r) {
    rows[0].secs.push_back(seconds([&] { write_checkpoint(single.string(), data); }));
    evict(single.string());
    CheckpointData back;
    rows[4].secs.push_back(seconds([&] { back = read_checkpoint(single.string()); }));
    same = same && back.weights == data.weights && back.adam_v == data.adam_v;
    remove_settled(single);

    rows[1].secs.push_back(write_folder(run.string(), data, 1));
    remove_settled(run);
    rows[2].secs.push_back(write_folder(run.string(), data, 2));
    evict_tree(folder);
    back = {};
    rows[5].secs.push_back(seconds([&] { back = read_checkpoint(folder.string()); }));
    same = same && back.weights == data.weights && back.adam_v == data.adam_v;
    back = {};
    rows[7].secs.push_back(seconds([&] { back = read_checkpoint(folder.string()); }));
    evict_tree(folder);
    bool restored = false;
    rows[10].secs.push_back(seconds([&] { restored = read_by_two_ranks(folder.string(), data); }));
    same = same && restored;
    remove_settled(run);

    const std::string dd_w = fmt::format(
        "dd if=/dev/zero of={} bs=16M count={} conv=fsync status=none", raw.string(), blocks);
    rows[3].secs.push_back(seconds([&] {
      if (std::system(dd_w.c_str()) != 0) fmt::print(stderr, "dd write failed\n");
    }));
    evict(raw.string());
    const std::string dd_r = fmt::format("dd if={} of=/dev/null bs=16M status=none", raw.string());
    rows[6].secs.push_back(seconds([&] {
      if (std::system(dd_r.c_str()) != 0) fmt::print(stderr, "dd read failed\n");
    }));
    remove_settled(raw);

    // dd writes zeros, which this VM's storage may handle faster than data (zero detection,
    // thin provisioning): the same bytes through plain write(2) are the fairer reference.
    rows[8].secs.push_back(seconds([&] { write_raw(raw, data); }));
    evict(raw.string());
    rows[9].secs.push_back(seconds([&] { read_raw(raw); }));
    remove_settled(raw);
  }
  const double dd_bytes = static_cast<double>(blocks) * (16 << 20);
  const double ddw = dd_bytes / median(rows[3].secs) / 1e9;
  const double ddr = dd_bytes / median(rows[6].secs) / 1e9;
  const double raww = bytes / median(rows[8].secs) / 1e9;
  const double rawr = bytes / median(rows[9].secs) / 1e9;
  fmt::print(
      "\n### {:.0f} MB: {} parameters x 3 (weights, adam_m, adam_v), {} tensors; median of {}\n\n",
      bytes / 1e6, n, data.params.size(), reps);
  fmt::print(
      "| operation | seconds | GB/s | vs dd | vs write(2)/read(2) of the same bytes |\n"
      "| --- | ---: | ---: | ---: | ---: |\n");
  for (const Row& row : rows) {
    const double rate = bytes / median(row.secs) / 1e9;
    fmt::print("| {} | {:.2f} | {:.2f} | {:.2f}x | {:.2f}x |\n", row.what, median(row.secs), rate,
               rate / (row.write ? ddw : ddr), rate / (row.write ? raww : rawr));
  }
  fmt::print("read-back matches what was written: {}\n", same ? "yes" : "NO");
  if (!same) std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? argv[1] : "/tmp";
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 2;
  const std::vector<ParamEntry> all = gpt2_small_params();
  const double full = 3.0 * static_cast<double>(numel(all)) * sizeof(float);
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) == 0) {
    const double avail = static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize);
    fmt::print("{}: {:.1f} GB free, need {:.1f} GB (checkpoint + dd file)\n", dir.string(),
               avail / 1e9, 2.3 * full / 1e9);
    if (avail < 2.3 * full) {
      fmt::print(stderr, "not enough free space in {}: pass another directory\n", dir.string());
      return 1;
    }
  }
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) > 0) fmt::print("load average at start: {:.2f}\n", load[0]);
  std::string sizes = argc > 3 ? argv[3] : "40,300,gpt2";
  for (size_t at = 0; at < sizes.size();) {
    const size_t comma = std::min(sizes.find(',', at), sizes.size());
    const std::string size = sizes.substr(at, comma - at);
    at = comma + 1;
    if (size == "gpt2")
      bench_size(dir, all, reps);
    else if (std::atof(size.c_str()) > 0)
      bench_size(dir, blocks_of(std::atof(size.c_str()) * 1e6), reps);
    else
      fmt::print(stderr, "unknown size '{}': a number of MB or gpt2\n", size);
  }
  if (::getloadavg(load, 3) > 0) fmt::print("\nload average at end: {:.2f}\n", load[0]);
  return 0;
}
