#include "trainrun/plan/collectives.h"

#include <algorithm>
#include <cmath>

namespace trainrun {

namespace {

struct Link {
  double bw, latency;
  std::string name;
};

// The link every hop of a ring waits for: the network once the job spans nodes.
Link slowest(int world, const Interconnect& net) {
  if (world > std::max(1, net.ranks_per_node))
    return {net.inter_bw, net.inter_latency, net.inter_name};
  return {net.intra_bw, net.intra_latency, net.intra_name};
}

}  // namespace

CollectiveTime allreduce_time(double bytes, int world, int buckets, const Interconnect& net) {
  CollectiveTime t;
  if (world < 2 || bytes <= 0) return t;
  const Link l = slowest(world, net);
  const double p = world, k = std::max(1, buckets);
  const double ring_bw = 2 * (p - 1) / p * bytes / std::max(l.bw, 1.0);
  const double ring_lat = k * 2 * (p - 1) * l.latency;
  const double tree_bw = 2 * bytes / std::max(l.bw, 1.0);
  const double tree_lat = k * 2 * std::ceil(std::log2(p)) * l.latency;
  const bool ring = ring_bw + ring_lat <= tree_bw + tree_lat;
  t.bandwidth_seconds = ring ? ring_bw : tree_bw;
  t.latency_seconds = ring ? ring_lat : tree_lat;
  t.seconds = t.bandwidth_seconds + t.latency_seconds;
  t.algorithm = ring ? "ring" : "tree";
  t.link = l.name;
  return t;
}

CollectiveTime half_allreduce_time(double bytes, int world, int buckets, const Interconnect& net) {
  CollectiveTime t;
  if (world < 2 || bytes <= 0) return t;
  const Link l = slowest(world, net);
  const double p = world, k = std::max(1, buckets);
  t.bandwidth_seconds = (p - 1) / p * bytes / std::max(l.bw, 1.0);
  t.latency_seconds = k * (p - 1) * l.latency;
  t.seconds = t.bandwidth_seconds + t.latency_seconds;
  t.algorithm = "ring";
  t.link = l.name;
  return t;
}

}  // namespace trainrun
