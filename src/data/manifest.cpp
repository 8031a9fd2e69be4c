// Shard manifests: writing, reading, the vocabulary check at open and the run's tokenizer.
#include "manifest.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "json.h"
#include "sha256.h"
#include "trainrun/errors.h"
#include "trainrun/tokenizer.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t as_u64(const Json* v) {
  return v && v->kind == Json::Kind::kNumber && v->number >= 0 ? static_cast<uint64_t>(v->number)
                                                               : 0;
}

std::string as_str(const Json* v) {
  return v && v->kind == Json::Kind::kString ? v->str : std::string();
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

std::optional<ShardManifest> read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / kManifestName;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  // A manifest.json of some other tool's (a dataset's own) is not ours to judge the shards by.
  const std::string text = slurp(path.string());
  if (text.find(kManifestFormat) == std::string::npos) return std::nullopt;
  const Json j = parse_json(text, path.string());
  if (as_str(j.get("format")) != kManifestFormat) return std::nullopt;
  const Json* tok = j.get("tokenizer");
  if (!tok || tok->kind != Json::Kind::kObject || as_u64(tok->get("vocab_size")) == 0)
    throw DataError(fmt::format(
        "{}: not a trainrun shard manifest (no tokenizer.vocab_size); re-create the shards with "
        "`trainrun data prepare --tokenizer`",
        path.string()));
  ShardManifest m;
  m.dir = dir;
  m.tokenizer_file = as_str(tok->get("file"));
  m.tokenizer_sha256 = as_str(tok->get("sha256"));
  m.tokenizer_source = as_str(tok->get("source"));
  m.vocab_size = static_cast<int>(as_u64(tok->get("vocab_size")));
  m.dtype = static_cast<int>(as_u64(j.get("dtype")));
  if (const Json* inputs = j.get("inputs"))
    for (const Json& in : inputs->items)
      m.inputs.push_back(
          {as_str(in.get("path")), as_u64(in.get("bytes")), as_u64(in.get("tokens"))});
  if (const Json* splits = j.get("splits")) {
    if (const Json* t = splits->get("train")) m.train_tokens = as_u64(t->get("tokens"));
    if (const Json* v = splits->get("val")) m.val_tokens = as_u64(v->get("tokens"));
  }
  return m;
}

void check_shard_manifests(const std::vector<std::string>& files, int vocab_size) {
  std::set<std::string> dirs;
  for (const std::string& f : files) dirs.insert(fs::path(f).parent_path().string());
  for (const std::string& d : dirs) {
    const auto m = read_manifest(d.empty() ? "." : d);
    if (!m || m->vocab_size <= vocab_size) continue;
    // A multiple of 64 keeps the output layer's matmuls aligned.
    const int suggest = (m->vocab_size + 63) / 64 * 64;
    throw DataError(fmt::format(
        "{}/{}: these shards were tokenized with {} ({} tokens) but model.vocab_size is {}; set "
        "model.vocab_size >= {} (e.g. --set model.vocab_size={}), or prepare the data with a "
        "smaller tokenizer",
        d.empty() ? "." : d, kManifestName, m->tokenizer_file, m->vocab_size, vocab_size,
        m->vocab_size, suggest));
  }
}

std::unique_ptr<Tokenizer> data_tokenizer(const DataConfig& data) {
  if (data.train.empty()) return nullptr;
  std::error_code ec;
  // data.train is a directory, a file or a glob whose directory part has no wildcard.
  const fs::path spec(data.train);
  const fs::path dir = fs::is_directory(spec, ec) ? spec : spec.parent_path();
  const auto m = read_manifest(dir.empty() ? "." : dir.string());
  if (!m) return nullptr;
  const std::string path = (fs::path(m->dir) / m->tokenizer_file).string();
  const std::string bytes = slurp(path);
  if (bytes.empty() || sha256_hex(bytes) != m->tokenizer_sha256)
    throw DataError(fmt::format(
        "{}: missing, or not the tokenizer {}/{} records (sha256 {}); restore it from {} or "
        "prepare the data again",
        path, m->dir, kManifestName, m->tokenizer_sha256, m->tokenizer_source));
  return std::make_unique<Tokenizer>(Tokenizer::parse(bytes, path));
}

}  // namespace trainrun
