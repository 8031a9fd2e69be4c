#include "trainrun/comm/device_mesh.h"

#include <fmt/format.h>

#include <stdexcept>

namespace trainrun {

DeviceMesh::DeviceMesh(NoGroups, Communicator& host, Communicator* device, MeshShape shape)
    : host_(host), device_(device), shape_(shape) {
  if (shape.world() != host.size())
    throw std::invalid_argument(fmt::format("DeviceMesh: {} is {} ranks, the world {}",
                                            shape.describe(), shape.world(), host.size()));
}

DeviceMesh::DeviceMesh(Communicator& host, Communicator* device, MeshShape shape,
                       const DeviceGroupFn& make_device)
    : DeviceMesh(NoGroups{}, host, device, shape) {
  const int rank = host.rank();
  const int t = rank % shape.tp, dp = rank / shape.tp;
  const int replica = dp / shape.dp_shard, shard = dp % shape.dp_shard;
  // Each group: the ranks that share `color`, ordered by `key` (their coordinate along it).
  struct Split {
    MeshAxis axis;
    int color, key;
  };
  for (const Split& s : {Split{MeshAxis::dp_replicate, shard * shape.tp + t, replica},
                         Split{MeshAxis::dp_shard, replica * shape.tp + t, shard},
                         Split{MeshAxis::tp, dp, t}, Split{MeshAxis::dp, t, dp}}) {
    Group& g = group(s.axis);
    const int n = shape.size(s.axis);
    if (n == shape.world()) {  // the whole world
      g.host = &host;
      g.device = device;
      continue;
    }
    // Every rank takes part in every split, in the same order. A group of one rank is split
    // too (cheap, once): a local communicator would not know the world's host name.
    g.owned_host = host.split(s.color, s.key);
    g.host = g.owned_host.get();
    if (make_device && n > 1) g.owned_device = make_device(*g.host);
    g.device = g.owned_device.get();
  }
}

DeviceMesh DeviceMesh::flat(Communicator& host, Communicator* device) {
  DeviceMesh m(NoGroups{}, host, device, MeshShape{1, host.size()});
  for (MeshAxis a : {MeshAxis::dp_shard, MeshAxis::dp}) {
    m.group(a).host = &host;
    m.group(a).device = device;
  }
  for (MeshAxis a : {MeshAxis::dp_replicate, MeshAxis::tp}) {
    Group& g = m.group(a);
    g.owned_host = make_local_communicator();
    g.host = g.owned_host.get();
  }
  return m;
}

DeviceMesh::~DeviceMesh() = default;
DeviceMesh::DeviceMesh(DeviceMesh&&) noexcept = default;

int DeviceMesh::coord(MeshAxis a) const {
  const int dp = host_.rank() / shape_.tp;
  switch (a) {
    case MeshAxis::dp_replicate:
      return dp / shape_.dp_shard;
    case MeshAxis::dp_shard:
      return dp % shape_.dp_shard;
    case MeshAxis::tp:
      return host_.rank() % shape_.tp;
    case MeshAxis::dp:
      break;
  }
  return dp;
}

Communicator& DeviceMesh::host_group(MeshAxis a) const {
  return *group(a).host;
}

Communicator& DeviceMesh::device_group(MeshAxis a) const {
  const Group& g = group(a);
  return g.device ? *g.device : *g.host;
}

}  // namespace trainrun
