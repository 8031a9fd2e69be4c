// The time of the gradient collectives, from a stated model: the alpha-beta (latency-bandwidth)
// model of the two algorithms NCCL and Open MPI choose between for large and small messages.
// With p ranks, a message of n bytes, per-hop latency a and per-rank bandwidth b (one
// direction):
//   ring allreduce   2 (p-1) a  +  2 (p-1)/p n / b   (reduce-scatter, then all-gather: each half
//                                                     is (p-1) a + (p-1)/p n / b)
//   tree allreduce   2 ceil(log2 p) a  +  2 n / b   (pipelined reduce up and broadcast down a
//                                                     binary tree: fewer hops, twice the bytes)
// Each gradient bucket is one collective, so the latency term counts once per bucket. Across
// nodes the ring's every hop waits for the slowest link, so a and b are the network's once a job
// spans nodes (NCCL's rings run each GPU's traffic through its own NIC); within one node they
// are NVLink's (or shared memory's, for CPU ranks). The faster algorithm is taken, as the
// libraries' tuners do.
#pragma once

#include <string>

namespace trainrun {

struct Interconnect {
  std::string intra_name, inter_name;      // "NVLink", "InfiniBand NDR 400 Gb/s", ...
  double intra_bw = 0, intra_latency = 0;  // bytes/s per rank one direction, seconds per hop
  double inter_bw = 0, inter_latency = 0;
  int ranks_per_node = 1;
};

struct CollectiveTime {
  double seconds = 0;
  double bandwidth_seconds = 0, latency_seconds = 0;  // the two terms
  const char* algorithm = "none";                     // "ring", "tree" or "none" (1 rank)
  std::string link;                                   // which link set the rate
};

// An allreduce of `bytes` per rank over `world` ranks, sent as `buckets` collectives.
CollectiveTime allreduce_time(double bytes, int world, int buckets, const Interconnect& net);
// A reduce-scatter or an all-gather (ZeRO-1's pair): half a ring allreduce each.
CollectiveTime half_allreduce_time(double bytes, int world, int buckets, const Interconnect& net);

}  // namespace trainrun
