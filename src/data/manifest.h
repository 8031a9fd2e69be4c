// manifest.json: what `trainrun data prepare --tokenizer` wrote into a shard directory (inputs,
// token counts, the tokenizer and its SHA-256), read back to check a model against the shards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainrun {

struct ManifestInput {
  std::string path;
  uint64_t bytes = 0, tokens = 0;
};

struct ShardManifest {
  std::string dir;             // where manifest.json is
  std::string tokenizer_file;  // relative to dir
  std::string tokenizer_sha256;
  std::string tokenizer_source;  // the file it was copied from
  int vocab_size = 0;
  int dtype = 0;
  double val_fraction = 0;
  std::vector<ManifestInput> inputs;
  uint64_t train_tokens = 0, val_tokens = 0;
};

inline constexpr const char* kShardManifestName = "manifest.json";
inline constexpr const char* kManifestFormat = "trainrun token shards";  // its "format" field

// True when `path` is a regular file that trainrun wrote as a shard manifest (its format field).
bool is_trainrun_manifest(const std::string& path);

std::string manifest_json(const ShardManifest& m);
// The manifest in dir, if there is one (a manifest.json without trainrun's "format" is not);
// throws DataError for one of ours that does not parse.
std::optional<ShardManifest> read_manifest(const std::string& dir);

// Refuses shards (files from data.train/data.val) whose manifest says they were made with
// another tokenizer than `tokenizer` (data.tokenizer; "" checks none), or whose tokenizer's
// vocabulary does not fit model.vocab_size; and a data.tokenizer whose own vocabulary does not
// fit, manifest or not. Throws DataError with the fix.
void check_shard_manifests(const std::vector<std::string>& files, int vocab_size,
                           const std::string& tokenizer);

// The directory whose manifest.json describes the shards `spec` names (a file, directory or
// glob whose directory part has no wildcard).
std::string shard_directory(const std::string& spec);

// Refuses a mixture whose sources (name, shard spec) have manifests naming different tokenizers.
void check_one_tokenizer(const std::vector<std::pair<std::string, std::string>>& sources);

}  // namespace trainrun
