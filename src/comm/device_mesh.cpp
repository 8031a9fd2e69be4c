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
  const int replica = rank / shape.dp_shard, shard = rank % shape.dp_shard;
  for (MeshAxis a : {MeshAxis::dp_replicate, MeshAxis::dp_shard}) {
    Group& g = group(a);
    const int n = shape.size(a);
    if (n == shape.world()) {  // the whole world
      g.host = &host;
      g.device = device;
      continue;
    }
    // Every rank takes part in both splits, in the same order. A group of one rank is split too
    // (cheap, once): a local communicator would not know the world's host name.
    g.owned_host =
        a == MeshAxis::dp_shard ? host.split(replica, shard) : host.split(shard, replica);
    g.host = g.owned_host.get();
    if (make_device && n > 1) g.owned_device = make_device(*g.host);
    g.device = g.owned_device.get();
  }
}

DeviceMesh DeviceMesh::flat(Communicator& host, Communicator* device) {
  DeviceMesh m(NoGroups{}, host, device, MeshShape{1, host.size()});
  m.shard_.host = &host;
  m.shard_.device = device;
  m.replicate_.owned_host = make_local_communicator();
  m.replicate_.host = m.replicate_.owned_host.get();
  return m;
}

DeviceMesh::~DeviceMesh() = default;
DeviceMesh::DeviceMesh(DeviceMesh&&) noexcept = default;

int DeviceMesh::coord(MeshAxis a) const {
  return a == MeshAxis::dp_replicate ? host_.rank() / shape_.dp_shard
                                     : host_.rank() % shape_.dp_shard;
}

Communicator& DeviceMesh::host_group(MeshAxis a) const {
  return *group(a).host;
}

Communicator& DeviceMesh::device_group(MeshAxis a) const {
  const Group& g = group(a);
  return g.device ? *g.device : *g.host;
}

}  // namespace trainrun
