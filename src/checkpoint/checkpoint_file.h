// Internal to src/checkpoint: the file writer without the finiteness pass, for the Checkpointer,
// which makes that pass itself in the caller's thread (so a refusal is synchronous) and must
// not pay for it twice.
#pragma once

#include <functional>
#include <string>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

// write_checkpoint without the non-finite check; every other check and the atomic write.
void write_checked_checkpoint(const std::string& path, const CheckpointData& data);

// What both layouts' readers return: the data, and a caveat of an ok checkpoint.
struct Loaded {
  CheckpointData data;
  std::string note;
};
// The Verdict of `load`, which throws Unusable for an intact checkpoint that must not be used and
// h5::H5Failure for damage; the data into `data` when given.
Verdict verdict_of(const std::function<Loaded()>& load, CheckpointData* data);

}  // namespace trainrun
