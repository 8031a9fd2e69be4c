// Internal to src/checkpoint: the sharded layout (docs/checkpoint-format.md). A checkpoint is a
// folder step-NNNNNNN/ holding rank-RRRRR-of-WWWWW.h5, one per rank (its shard_of range of the
// flat weights and moments, contiguous, with a CRC-32C per data set in attributes), and
// MANIFEST, written last by rank 0: the metadata record (checkpoint_metadata.h), one line per
// shard file with its range and CRC-32Cs, and the CRC-32C of all that. The manifest is the
// commit point.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

// 4: /metadata and /config are scalar strings (3: character arrays, still read).
inline constexpr int kShardedFormatVersion = 4;
inline constexpr int kOldestShardedFormatVersion = 3;
inline constexpr const char* kManifestName = "MANIFEST";

// "rank-00001-of-00004.h5"
std::string shard_file_name(int rank, int world);

// Writes this rank's file into `dir` (created if missing) atomically; no finiteness check.
// Throws CheckpointWriteError naming the file.
void write_shard(const std::string& dir, const CheckpointShard& shard);

// Waits up to `timeout_s` for all `world` shard files of `step` in `dir`, checks that each
// holds the range it should, writes the MANIFEST atomically and then removes shard files the
// manifest does not list (left by an earlier attempt with another world size). Throws
// CheckpointWriteError naming the missing or wrong file; writes no manifest then.
void commit_sharded(const std::string& dir, int64_t step, int world, double timeout_s);

bool has_manifest(const std::string& dir);

// The sharded counterparts of judge() and describe_headers() in checkpoint_file.cpp: read or
// only verify every byte (manifest checksum, each shard's attributes against the manifest, its
// data checksums, its CRC-32C, finiteness, sane values).
// With `moments`, the data keeps only that flat range of the optimizer moments (and those of
// the other ranges are neither read nor checked).
Verdict judge_sharded(const std::string& dir, CheckpointData* data,
                      std::optional<Shard> moments = std::nullopt);
std::string describe_sharded(const std::string& dir);

}  // namespace trainrun
