// Internal to src/checkpoint: the checkpoint layout training writes (format 5,
// docs/checkpoint-format.md). A checkpoint is a folder step-NNNNNNN/ holding
//   rank-RRRRR-of-WWWWW.h5, one per rank: /slices, the rank's tensor slices back to back
//     (float32, contiguous, unfiltered: each slice's CRC-32C is its checksum), and /index, the
//     JSON table of those slices (tensor, box, first element, CRC-32C), the tensor table and the
//     train state;
//   MANIFEST, written last by rank 0 from every rank's index (the commit point): JSON naming every
//     global tensor with its shape, every slice with its file, box, position and CRC-32C, the
//     train state and the resolved config, then a line `crc32c=XXXXXXXX` over all of that.
// Rank 0 learns what the others wrote from their files, so no collective is needed to commit and
// a background writer thread (which must not call MPI) can commit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

inline constexpr int kFolderFormatVersion = 5;
inline constexpr const char* kManifestName = "MANIFEST";

// "rank-00001-of-00004.h5" (the sharded formats 3-4 used the same names).
std::string rank_file_name(int rank, int world);
bool has_manifest(const std::string& dir);
// True when `dir`'s MANIFEST is a format 3-4 sharded one (read by sharded_checkpoint.h).
bool has_legacy_manifest(const std::string& dir);
// The whole MANIFEST of `dir` (either format's), bounded, only from a regular file; throws
// h5::H5Failure saying a folder without one is a save that never finished.
std::string read_manifest_text(const std::string& dir);

// Writes this rank's file into `dir` (created if missing) atomically; no finiteness check.
// Throws CheckpointWriteError naming the file.
void write_rank_file(const std::string& dir, const RankSnapshot& snap);

// Waits up to `timeout_s` for all `world` rank files of `step` in `dir`, checks that together
// they cover every tensor exactly once, writes the MANIFEST atomically and then removes rank
// files it does not list (left by an earlier attempt with another world size). Throws
// CheckpointWriteError naming the missing or wrong file; writes no manifest then.
void commit_folder(const std::string& dir, int64_t step, int world, double timeout_s);

// Opens the checkpoint: reads and checks the manifest (checksum, format, every slice inside its
// tensor and its file, every tensor covered exactly once, sane state values). Throws
// ckpt_io::Unusable or h5::H5Failure.
std::unique_ptr<StateSource> open_folder(const std::string& dir, TrainState* state);
// Every slice of every file read and checked (CRC-32C, finiteness) without being kept.
Verdict judge_folder(const std::string& dir);
std::string describe_folder(const std::string& dir);

}  // namespace trainrun
