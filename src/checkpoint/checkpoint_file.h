// Internal to src/checkpoint: the file writer without the finiteness pass, for the Checkpointer,
// which makes that pass itself in the caller's thread (so a refusal is synchronous) and must
// not pay for it twice.
#pragma once

#include <string>

#include "trainrun/checkpoint.h"

namespace trainrun {

// write_checkpoint without the non-finite check; every other check and the atomic write.
void write_checked_checkpoint(const std::string& path, const CheckpointData& data);

}  // namespace trainrun
