// Shard manifests: writing, reading, the vocabulary check at open and the run's tokenizer.
#include "manifest.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "json.h"
#include "sha256.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/tokenizer.h"
#include "whole_file.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

uint64_t as_u64(const Json* v) {
  return v && v->is_number() && v->get<double>() >= 0 ? v->get<uint64_t>() : 0;
}

std::string as_str(const Json* v) {
  return v && v->is_string() ? v->get<std::string>() : "";
}

// data.tokenizer as read once: what the manifest's hash is compared with, and the tokenizer.
struct ConfiguredTokenizer {
  std::string path, sha256;
  Tokenizer tok;
};

ConfiguredTokenizer read_configured(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw DataError(fmt::format(
        "data.tokenizer='{}': no such file (the tokenizer.json the shards were made with)", path));
  const std::string bytes = read_whole_file(path);
  return {path, sha256_hex(bytes), Tokenizer::parse(bytes, path)};
}

std::string shown(const std::string& dir) {
  return dir.empty() ? "." : dir;
}

// The same tokenizer is the same bytes: the manifest records the SHA-256 of the file.
void check_same_tokenizer(const ShardManifest& m, const ConfiguredTokenizer& conf) {
  if (conf.sha256 == m.tokenizer_sha256) return;
  const std::string theirs = (fs::path(m.dir) / m.tokenizer_file).string();
  throw DataError(fmt::format(
      "{}/{}: these shards were made with another tokenizer than data.tokenizer='{}' (its "
      "sha256 is {}, the manifest records {}, copied from {}): set data.tokenizer={} (or leave "
      "it unset), or prepare the data again with --tokenizer {}",
      m.dir, kShardManifestName, conf.path, conf.sha256, m.tokenizer_sha256, m.tokenizer_source,
      theirs, conf.path));
}

// A multiple of 64 keeps the output layer's matmuls aligned.
int suggested_vocab(int vocab) {
  return (vocab + 63) / 64 * 64;
}

}  // namespace

std::string manifest_json(const ShardManifest& m) {
  std::string out = fmt::format("{{\n  \"format\": \"{}\",\n  \"version\": 1,\n", kManifestFormat);
  out += fmt::format(
      "  \"tokenizer\": {{\"file\": {}, \"sha256\": {}, \"vocab_size\": {}, \"source\": {}}},\n",
      json_literal(m.tokenizer_file), json_literal(m.tokenizer_sha256), m.vocab_size,
      json_literal(m.tokenizer_source));
  out += fmt::format("  \"dtype\": {},\n  \"val_fraction\": {},\n  \"inputs\": [", m.dtype,
                     m.val_fraction);
  for (size_t i = 0; i < m.inputs.size(); ++i)
    out += fmt::format("{}\n    {{\"path\": {}, \"bytes\": {}, \"tokens\": {}}}", i ? "," : "",
                       json_literal(m.inputs[i].path), m.inputs[i].bytes, m.inputs[i].tokens);
  out += fmt::format(
      "\n  ],\n  \"splits\": {{\n    \"train\": {{\"file\": \"train.bin\", \"tokens\": {}}},\n"
      "    \"val\": {{\"file\": \"val.bin\", \"tokens\": {}}}\n  }}\n}}\n",
      m.train_tokens, m.val_tokens);
  return out;
}

bool is_trainrun_manifest(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  return read_whole_file(path).find(kManifestFormat) != std::string::npos;
}

std::optional<ShardManifest> read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / kShardManifestName;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  // A manifest.json of some other tool's (a dataset's own) is not ours to judge the shards by.
  const std::string text = read_whole_file(path.string());
  if (text.find(kManifestFormat) == std::string::npos) return std::nullopt;
  const Json j = parse_json(text, path.string());
  if (as_str(member(j, "format")) != kManifestFormat) return std::nullopt;
  const Json* tok = member(j, "tokenizer");
  if (!tok || !tok->is_object() || as_u64(member(*tok, "vocab_size")) == 0)
    throw DataError(fmt::format(
        "{}: not a trainrun shard manifest (no tokenizer.vocab_size); re-create the shards with "
        "`trainrun data prepare --tokenizer`",
        path.string()));
  ShardManifest m;
  m.dir = dir;
  m.tokenizer_file = as_str(member(*tok, "file"));
  m.tokenizer_sha256 = as_str(member(*tok, "sha256"));
  m.tokenizer_source = as_str(member(*tok, "source"));
  m.vocab_size = static_cast<int>(as_u64(member(*tok, "vocab_size")));
  m.dtype = static_cast<int>(as_u64(member(j, "dtype")));
  if (const Json* inputs = member(j, "inputs"); inputs && inputs->is_array())
    for (const Json& in : *inputs)
      m.inputs.push_back(
          {as_str(member(in, "path")), as_u64(member(in, "bytes")), as_u64(member(in, "tokens"))});
  if (const Json* splits = member(j, "splits")) {
    if (const Json* t = member(*splits, "train")) m.train_tokens = as_u64(member(*t, "tokens"));
    if (const Json* v = member(*splits, "val")) m.val_tokens = as_u64(member(*v, "tokens"));
  }
  return m;
}

void check_shard_manifests(const std::vector<std::string>& files, int vocab_size,
                           const std::string& tokenizer) {
  std::optional<ConfiguredTokenizer> conf;
  if (!tokenizer.empty()) {
    conf = read_configured(tokenizer);
    const int v = conf->tok.vocab_size();
    if (v > vocab_size)
      throw DataError(
          fmt::format("data.tokenizer='{}' has {} tokens but model.vocab_size is {}: set "
                      "model.vocab_size >= {} (e.g. --set model.vocab_size={})",
                      tokenizer, v, vocab_size, v, suggested_vocab(v)));
  }
  std::set<std::string> dirs;
  for (const std::string& f : files) dirs.insert(fs::path(f).parent_path().string());
  for (const std::string& d : dirs) {
    const auto m = read_manifest(shown(d));
    if (!m) continue;
    if (conf) check_same_tokenizer(*m, *conf);
    if (m->vocab_size <= vocab_size) continue;
    throw DataError(fmt::format(
        "{}/{}: these shards were tokenized with {} ({} tokens) but model.vocab_size is {}; set "
        "model.vocab_size >= {} (e.g. --set model.vocab_size={}), or prepare the data with a "
        "smaller tokenizer",
        shown(d), kShardManifestName, m->tokenizer_file, m->vocab_size, vocab_size, m->vocab_size,
        suggested_vocab(m->vocab_size)));
  }
}

std::string shard_directory(const std::string& spec) {
  std::error_code ec;
  // A directory, a file or a glob whose directory part has no wildcard.
  const fs::path p(spec);
  return shown((fs::is_directory(p, ec) ? p : p.parent_path()).string());
}

void check_one_tokenizer(const std::vector<std::pair<std::string, std::string>>& sources) {
  std::optional<std::pair<std::string, ShardManifest>> first;
  for (const auto& [name, spec] : sources) {
    auto m = read_manifest(shard_directory(spec));
    if (!m) continue;
    if (!first) {
      first.emplace(name, std::move(*m));
      continue;
    }
    if (m->tokenizer_sha256 != first->second.tokenizer_sha256)
      throw DataError(fmt::format(
          "data.mix: source '{}' was tokenized with {} (sha256 {:.12}) but source '{}' with {} "
          "(sha256 {:.12}): the same id would mean different text; prepare every source with one "
          "tokenizer",
          first->first, first->second.tokenizer_source, first->second.tokenizer_sha256, name,
          m->tokenizer_source, m->tokenizer_sha256));
  }
}

std::unique_ptr<Tokenizer> data_tokenizer(const DataConfig& data) {
  // A mixture's sources share one tokenizer (open_sample_stream checks): the first one's.
  const std::string& train = !data.train.empty() ? data.train
                             : data.mix.empty()  ? data.train
                                                 : data.mix.front().path;
  if (train.empty()) return nullptr;
  const auto m = read_manifest(shard_directory(train));
  if (!data.tokenizer.empty()) {
    ConfiguredTokenizer conf = read_configured(data.tokenizer);
    if (m) check_same_tokenizer(*m, conf);
    return std::make_unique<Tokenizer>(std::move(conf.tok));
  }
  if (!m) return nullptr;
  const std::string path = (fs::path(m->dir) / m->tokenizer_file).string();
  const std::string bytes = read_whole_file(path);
  if (bytes.empty() || sha256_hex(bytes) != m->tokenizer_sha256)
    throw DataError(fmt::format(
        "{}: missing, or not the tokenizer {}/{} records (sha256 {}); restore it from {} or "
        "prepare the data again",
        path, m->dir, kShardManifestName, m->tokenizer_sha256, m->tokenizer_source));
  return std::make_unique<Tokenizer>(Tokenizer::parse(bytes, path));
}

}  // namespace trainrun
