// Internal to src/checkpoint: the reader of the sharded layout of formats 3-4, which training
// wrote before format 5 (checkpoint_folder.h) replaced it; still read so that those checkpoints
// resume (docs/checkpoint-format.md). A checkpoint is a folder step-NNNNNNN/ holding
// rank-RRRRR-of-WWWWW.h5, one per rank (its shard_of range of the flat weights and moments,
// contiguous, with a CRC-32C per data set in attributes), and a text MANIFEST written last by
// rank 0: the metadata record (checkpoint_metadata.h), one line per shard file with its range and
// CRC-32Cs, and the CRC-32C of all that.
#pragma once

#include <string>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

// 4: /metadata and /config are scalar strings (3: character arrays, still read).
inline constexpr int kShardedFormatVersion = 4;
inline constexpr int kOldestShardedFormatVersion = 3;

// Read (into `data` when given) or only verify every byte: the manifest's checksum, each shard's
// attributes against the manifest, its data checksums, its CRC-32C, finiteness, sane values.
Verdict judge_sharded(const std::string& dir, CheckpointData* data);
std::string describe_sharded(const std::string& dir);

}  // namespace trainrun
