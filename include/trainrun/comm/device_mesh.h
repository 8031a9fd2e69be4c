// DeviceMesh: the ranks of a job as a grid with named axes, outermost first (nanotron's
// ParallelContext, PyTorch's DeviceMesh):
//   dp_replicate  replica groups: each holds one whole copy of the sharded state (hybrid sharding,
//                 HSDP: its collectives cross nodes once per step, on a shard's worth of data);
//   dp_shard      the ranks one copy of the sharded state is split over (ZeRO's axis: its
//                 reduce-scatter and all-gather stay inside a group, inside a node when it fits).
//   tp            tensor parallel, innermost: the ranks one layer is split over (Megatron's
//                 column and row split, linear.h), whose collectives run inside every layer, so
//                 they are consecutive ranks, inside one node.
// A rank's coordinates follow from its rank,
//   rank = (replica * dp_shard + shard) * tp + t,
// so a tp group is tp consecutive ranks and a dp_shard group (with tp = 1) dp_shard consecutive
// ones: one node's with mpirun's default placement. An axis's group is the ranks that differ
// only in its coordinate; `dp` (not an axis) is the data-parallel ranks of this rank's tp
// coordinate, dp_replicate x dp_shard of them, over which the data-parallel strategies reduce.
// Each group has a host communicator (MPI) and a device one (NCCL on CUDA, else the host one).
//
// Thread safety: immutable after construction; the groups are used as communicators are (one
// collective at a time per communicator).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "trainrun/comm/comm.h"

namespace trainrun {

// The groups of a mesh: its three axes and `dp`, every data-parallel rank of a tp coordinate.
enum class MeshAxis { dp_replicate, dp_shard, tp, dp };
inline const char* axis_name(MeshAxis a) {
  switch (a) {
    case MeshAxis::dp_replicate:
      return "dp_replicate";
    case MeshAxis::dp_shard:
      return "dp_shard";
    case MeshAxis::tp:
      return "tp";
    case MeshAxis::dp:
      break;
  }
  return "dp";
}

// The mesh's sizes, known before any rank starts (the launcher, --dry-run and plan use it).
struct MeshShape {
  int dp_replicate = 1, dp_shard = 1, tp = 1;
  int world() const { return dp_replicate * dp_shard * tp; }
  int dp() const { return dp_replicate * dp_shard; }  // the data-parallel ranks
  int size(MeshAxis a) const {
    switch (a) {
      case MeshAxis::dp_replicate:
        return dp_replicate;
      case MeshAxis::dp_shard:
        return dp_shard;
      case MeshAxis::tp:
        return tp;
      case MeshAxis::dp:
        break;
    }
    return dp();
  }
  // `world` ranks split `tp` ways, the rest in `dp_replicate` replica groups; throws
  // std::invalid_argument when that does not divide them (the config rules refuse that first,
  // naming the key). Header-only, as the launcher and the planner use it without communicators.
  static MeshShape of(int world, int dp_replicate, int tp = 1) {
    if (world < 1 || dp_replicate < 1 || tp < 1 || world % tp != 0 ||
        (world / tp) % dp_replicate != 0)
      throw std::invalid_argument(fmt::format(
          "a device mesh of {} ranks cannot have tp {} and {} replica groups: tp divides the "
          "ranks and dp_replicate the ranks / tp",
          world, tp, dp_replicate));
    return MeshShape{dp_replicate, world / tp / dp_replicate, tp};
  }
  // "dp_replicate 2 x dp_shard 4", "dp_replicate 1 x dp_shard 2 x tp 2"
  std::string describe() const {
    std::string s = fmt::format("dp_replicate {} x dp_shard {}", dp_replicate, dp_shard);
    if (tp > 1) s += fmt::format(" x tp {}", tp);
    return s;
  }
};

class DeviceMesh {
 public:
  // Makes the device communicator of a group from its host one; null when the host one serves
  // (CPU tensors, or a group of one rank).
  using DeviceGroupFn = std::function<std::unique_ptr<Communicator>(Communicator& host_group)>;

  // Collective over `host` (the world): splits it into every axis's groups. `device`: the
  // world's device communicator (null: `host` serves). An axis of size 1 gets a one-rank
  // group and an axis as large as the world the world itself, without a split.
  DeviceMesh(Communicator& host, Communicator* device, MeshShape shape,
             const DeviceGroupFn& make_device = {});
  // A mesh of one axis: every rank in one dp_shard group (no split; tests, one-rank tools).
  // Its tp group is each rank alone.
  static DeviceMesh flat(Communicator& host, Communicator* device = nullptr);
  ~DeviceMesh();
  DeviceMesh(DeviceMesh&&) noexcept;
  DeviceMesh& operator=(DeviceMesh&&) = delete;
  DeviceMesh(const DeviceMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  // This rank's coordinate along `a` (dp: replica * dp_shard + shard).
  int coord(MeshAxis a) const;
  // The world: every rank.
  Communicator& host() const { return host_; }
  Communicator& device() const { return device_ ? *device_ : host_; }
  // The group of `a` through this rank.
  Communicator& host_group(MeshAxis a) const;
  Communicator& device_group(MeshAxis a) const;

 private:
  struct Group {
    Communicator* host = nullptr;    // owned below, or the world's
    Communicator* device = nullptr;  // null: host serves
    std::unique_ptr<Communicator> owned_host, owned_device;
  };
  struct NoGroups {};  // the members set, the groups left to the caller
  DeviceMesh(NoGroups, Communicator& host, Communicator* device, MeshShape shape);
  Group& group(MeshAxis a) { return groups_[static_cast<size_t>(a)]; }
  const Group& group(MeshAxis a) const { return groups_[static_cast<size_t>(a)]; }

  Communicator& host_;
  Communicator* device_;
  MeshShape shape_;
  Group groups_[4];  // by MeshAxis
};

}  // namespace trainrun
