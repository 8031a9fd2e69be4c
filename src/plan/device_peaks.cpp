// device_peak: what one rank's device can do, for `trainrun plan`. A CPU is measured now (its
// sgemm rate and copy bandwidth vary by machine and load); GPUs come from a table of vendor
// figures, because planning a GPU run usually happens on a machine without that GPU.
// The checkpoint write rate is neither: an assumption (below), stated as one in the plan.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/core/errors.h"
#include "trainrun/plan/plan.h"

namespace trainrun {

namespace {

struct GpuSpec {
  const char* key;
  const char* name;
  double bf16, fp32;  // dense FLOP/s, no sparsity
  double mem_bw;      // HBM bytes/s
  double memory;      // bytes
  double nvlink;      // bytes/s one direction per GPU
  double network;     // bytes/s per GPU between nodes
  const char* network_name;
  double pcie;  // bytes/s one direction, device to host: a checkpoint's snapshot copy
};

// NVIDIA datasheets. NVLink: A100 600 GB/s, H100/H200 900 GB/s both directions together, so
// 300 / 450 GB/s each way; between nodes one InfiniBand NIC per GPU (HDR 200 Gb/s for A100
// systems, NDR 400 Gb/s for H100/H200). PCIe: A100 Gen4 64 GB/s, H100/H200 Gen5 128 GB/s both
// directions together, so 32 / 64 GB/s device to host.
constexpr GpuSpec kGpus[] = {
    {"A100", "A100 SXM 80GB", 312e12, 19.5e12, 2.0e12, 80e9, 300e9, 25e9, "InfiniBand HDR 200 Gb/s",
     32e9},
    {"H100", "H100 SXM", 989e12, 67e12, 3.35e12, 80e9, 450e9, 50e9, "InfiniBand NDR 400 Gb/s",
     64e9},
    {"H200", "H200 SXM", 989e12, 67e12, 4.8e12, 141e9, 450e9, 50e9, "InfiniBand NDR 400 Gb/s",
     64e9},
};

// MPI_Allreduce of 100 MB fp32 over 2 ranks on one of our CPU machines: 0.12-0.14 s.
constexpr double kCpuSharedMemoryBw = 0.8e9;
// Between CPU nodes we assume plain 10 GbE.
constexpr double kCpuNetworkBw = 1.25e9;
// Per-hop latencies of the collectives model (collectives.h). GPUs: NCCL's low-latency protocol
// over NVLink, a few microseconds a step, and an InfiniBand hop with its software, about 5;
// nodes of 8 GPUs (DGX/HGX). CPU ranks: MPI over shared memory about 1 us, over TCP about 50.
// All assumed (`trainrun plan --link-bw/--link-latency` state a measured link).
constexpr double kNvlinkLatency = 3e-6, kNetworkLatency = 5e-6;
constexpr int kGpusPerNode = 8;
constexpr double kCpuSharedMemoryLatency = 1e-6, kCpuNetworkLatency = 50e-6;

// The rate one rank writes a checkpoint file at, HDF5 encoding, fletcher32 checksums, fsync and
// rename included, when `trainrun plan --disk-bw` does not say. Assumed, not measured: planning
// must not write gigabytes to find out, and the disk a run writes to is often not this machine's
// (a cluster's file system, a GPU node's NVMe). Why 200 MB/s: the one writer we have measured
// (bench/RESULTS.md, build/bench/bench_checkpoint on our 2-core CPU machine) wrote GPT-2 small's
// 1.5 GB state at 0.17-0.19 GB/s, a quarter of what dd reached on the same disk (0.70 GB/s): the
// writer, not the disk, set the rate, so a faster disk alone would not raise it. A plan that
// assumes too fast a disk misses the warning that checkpointing eats the run, so we take the
// measured figure rather than a disk's datasheet. Every rank is assumed to write at this rate
// (sharded ranks in parallel: separate disks, a parallel file system, or a writer-bound rate);
// when ranks share one disk that is the limit, pass --disk-bw as its rate over the ranks on it.
constexpr double kAssumedDiskBw = 200e6;

void assume_disk(DevicePeak& p) {
  p.disk_bw = kAssumedDiskBw;
  p.disk_source = fmt::format(
      "{:.0f} MB/s per rank (assumed; measure with build/bench/bench_checkpoint DIR or pass "
      "--disk-bw)",
      kAssumedDiskBw / 1e6);
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const GpuSpec* find_gpu(const std::string& text) {
  const std::string u = upper(text);
  for (const GpuSpec& g : kGpus)
    if (u.find(g.key) != std::string::npos) return &g;
  return nullptr;
}

}  // namespace

double mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return 0;
}

namespace {

// Copy bandwidth of this process now: the AdamW loop and activations are memory bound.
double measure_copy_bandwidth() {
  const size_t n = size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    a[static_cast<size_t>(i)] = b[n - 1 - static_cast<size_t>(i)];  // keep the copy observable
    best = std::max(best, 2.0 * static_cast<double>(n) / s);        // read + write
  }
  return best;
}

DevicePeak gpu_peak(const GpuSpec& g, const Experiment& exp, const std::string& how) {
  DevicePeak p;
  p.name = g.name;
  p.flops = exp.train.precision == Precision::bf16 ? g.bf16 : g.fp32;
  p.mem_bw = g.mem_bw;
  p.memory = g.memory;
  const bool multi_node = exp.distributed.nodes > 1;
  p.net = {"NVLink (one direction)", g.network_name, g.nvlink, kNvlinkLatency, g.network,
           kNetworkLatency,          kGpusPerNode};
  p.link_bw = multi_node ? g.network : g.nvlink;
  p.host_bw = g.pcie;
  assume_disk(p);
  p.source = fmt::format(
      "table ({}): NVIDIA datasheet, {} {:.1f} TFLOP/s dense, {:.2f} TB/s HBM, {:.0f} GB; "
      "collectives over {} {:.0f} GB/s per GPU; snapshot to host over PCIe {:.0f} GB/s",
      how, exp.train.precision, p.flops / 1e12, p.mem_bw / 1e12, p.memory / 1e9,
      multi_node ? g.network_name : "NVLink (one direction)", p.link_bw / 1e9, p.host_bw / 1e9);
  return p;
}

DevicePeak cpu_peak(const Experiment& exp) {
  auto be = make_cpu_backend();
  const double gflops = measure_gemm_peak_gflops(*be, 1024);
  // Ranks started on one machine share its cores, memory and memory bandwidth.
  const double share = std::max(1, exp.distributed.nproc);
  DevicePeak p;
  p.name = "cpu (measured sgemm)";
  p.flops = gflops * 1e9 / share;
  p.mem_bw = measure_copy_bandwidth() / share;
  p.memory = mem_available_bytes() / share;
  const bool multi_node = exp.distributed.nodes > 1;
  p.net = {"shared memory",
           "10 GbE (assumed)",
           kCpuSharedMemoryBw,
           kCpuSharedMemoryLatency,
           kCpuNetworkBw,
           kCpuNetworkLatency,
           std::max(1, exp.distributed.nproc)};
  p.link_bw = multi_node ? kCpuNetworkBw : kCpuSharedMemoryBw;
  p.host_bw = p.mem_bw / 2;  // mem_bw counts a copy's read and its write
  assume_disk(p);
  p.source = fmt::format(
      "measured now: {:.1f} GFLOP/s sgemm 1024^3 (oneDNN) and {:.1f} GB/s memcpy on this "
      "process, shared by {} rank(s) per node; memory: MemAvailable {:.1f} GiB; collectives: {}",
      gflops, p.mem_bw * share / 1e9, exp.distributed.nproc, p.memory * share / 1073741824.0,
      multi_node ? "10 GbE 1.25 GB/s (assumed)"
                 : "shared memory 0.8 GB/s (MPI_Allreduce of 100 MB over 2 ranks, measured, "
                   "FACTS.md)");
  return p;
}

}  // namespace

void set_link(DevicePeak& peak, bool multi_node, double bw, double latency) {
  Interconnect& n = peak.net;
  std::string& name = multi_node ? n.inter_name : n.intra_name;
  if (bw > 0) {
    (multi_node ? n.inter_bw : n.intra_bw) = bw;
    peak.link_bw = bw;
    name = "the --link-bw link";
  }
  if (latency >= 0) (multi_node ? n.inter_latency : n.intra_latency) = latency;
}

DevicePeak device_peak(const Experiment& exp, const std::string& gpu) {
  if (!gpu.empty()) {
    const GpuSpec* g = find_gpu(gpu);
    if (!g)
      throw ConfigError(fmt::format("--gpu '{}' is not in the table: use A100, H100 or H200", gpu));
    return gpu_peak(*g, exp, fmt::format("--gpu {}", gpu));
  }
  if (exp.device == DeviceChoice::cuda) return gpu_peak(kGpus[1], exp, "device cuda, default H100");
  if (exp.device == DeviceChoice::automatic) {
    std::string why;
    if (auto be = make_cuda_backend(0, &why)) {
      const std::string here = be->describe();
      if (const GpuSpec* g = find_gpu(here))
        return gpu_peak(*g, exp, fmt::format("this machine: {}", here));
      return gpu_peak(kGpus[1], exp,
                      fmt::format("this machine: {}, not in the table: H100 assumed", here));
    }
  }
  return cpu_peak(exp);
}

}  // namespace trainrun
