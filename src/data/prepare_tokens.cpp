// `trainrun data prepare --tokenizer`: text files -> train.bin, val.bin and manifest.json. Each
// file is read in blocks of segments cut at split boundaries (text_blocks.h); a block's segments
// are encoded in parallel and written in order, so memory stays at a few blocks whatever the
// input size, and the shards hold exactly the ids of encoding each file whole.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "manifest.h"
#include "prepare_inputs.h"
#include "sha256.h"
#include "shard.h"
#include "text_blocks.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/output_files.h"
#include "trainrun/data/tokenizer.h"
#include "whole_file.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

constexpr size_t kSegmentBytes = size_t{1} << 20;

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out.flush())
      throw DataError(fmt::format("cannot write {}; check free space and permissions", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw DataError(fmt::format("cannot write {} ({})", path, ec.message()));
  }
}

}  // namespace

std::string prepare_token_shards(const PrepareRequest& req) {
  if (req.texts.empty()) throw ConfigError("no text files to prepare");
  if (!(req.val_fraction > 0.0 && req.val_fraction < 1.0))
    throw DataError(fmt::format("val_fraction={} must be in (0, 1)", req.val_fraction));
  const std::string tok_bytes = read_whole_file(req.tokenizer);
  const Tokenizer tok = Tokenizer::parse(tok_bytes, req.tokenizer);
  ShardManifest man;
  man.tokenizer_file = "tokenizer.json";
  man.tokenizer_sha256 = sha256_hex(tok_bytes);
  man.tokenizer_source = fs::absolute(req.tokenizer).lexically_normal().string();
  man.vocab_size = tok.vocab_size();
  man.val_fraction = req.val_fraction;
  const int64_t eot = req.eot == kEotAuto ? tok.end_of_text() : req.eot;
  if (eot >= tok.vocab_size())
    throw ConfigError(
        fmt::format("--eot {}: the tokenizer {} has ids 0-{}; pass one of them or "
                    "`none`",
                    eot, req.tokenizer, tok.vocab_size() - 1));
  const std::vector<PrepareInput> inputs = prepare_inputs(req.texts);
  uint64_t total = 0;
  for (const PrepareInput& in : inputs) total += in.bytes;
  // The split: val starts at the first piece boundary after this many input bytes.
  const auto split =
      static_cast<uint64_t>(std::floor(static_cast<double>(total) * (1 - req.val_fraction)));

  create_output_directory(req.out_dir);
  std::error_code ec;
  const fs::path out(req.out_dir);
  ShardWriter train((out / "train.bin").string(), man.vocab_size);
  ShardWriter val((out / "val.bin").string(), man.vocab_size);
  man.dtype = train.width();
  const int nt = req.threads > 0 ? req.threads : omp_get_max_threads();
  PrepareProgress progress(req.progress, total);
  uint64_t file_start = 0, done = 0;
  std::vector<TextSegment> segs;
  std::vector<std::vector<int32_t>> ids;
  for (const PrepareInput& input : inputs) {
    const std::string& path = input.path;
    if (eot >= 0 && file_start > 0) {  // between documents, in the split the next one starts in
      const auto id = static_cast<int32_t>(eot);
      (file_start >= split ? val : train).append(&id, 1);
    }
    const uint64_t cut = split >= file_start ? split - file_start : 0;
    TextBlocks blocks(path, req.block_bytes, kSegmentBytes, cut);
    ManifestInput in{path, blocks.size(), 0};
    while (blocks.next(segs)) {
      const auto n = static_cast<int64_t>(segs.size());
      ids.resize(segs.size());
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
      for (int64_t i = 0; i < n; ++i) {
        ids[static_cast<size_t>(i)].clear();
        tok.encode(segs[static_cast<size_t>(i)].text, ids[static_cast<size_t>(i)]);
      }
      for (size_t i = 0; i < segs.size(); ++i) {
        ShardWriter& dest = file_start + segs[i].offset >= split ? val : train;
        dest.append(ids[i].data(), ids[i].size());
        in.tokens += ids[i].size();
        done += segs[i].text.size();
      }
      progress.update(done, train.count() + val.count());
    }
    file_start += blocks.size();
    man.inputs.push_back(std::move(in));
  }
  man.train_tokens = train.count();
  man.val_tokens = val.count();
  if (man.train_tokens == 0 || man.val_tokens == 0)
    throw DataError(fmt::format(
        "the {} split is empty ({} input bytes, val_fraction {}): the text has no piece "
        "boundary on that side of the split; use more text or another --val-fraction",
        man.train_tokens == 0 ? "train" : "val", total, req.val_fraction));
  train.commit();
  val.commit();
  const std::string tok_copy = (out / man.tokenizer_file).string();
  if (!fs::equivalent(req.tokenizer, tok_copy, ec)) write_text_file(tok_copy, tok_bytes);
  write_text_file((out / kManifestName).string(), manifest_json(man));
  return fmt::format(
             "wrote {} ({} tokens) and val.bin ({} tokens), {} bit tokens, vocab {}; manifest {}",
             (out / "train.bin").string(), man.train_tokens, man.val_tokens, 8 * man.dtype,
             man.vocab_size, (out / kManifestName).string()) +
         (inputs.size() < 2 ? std::string()
          : eot >= 0
              ? fmt::format("; {} documents, end-of-text id {} between them", inputs.size(), eot)
              : fmt::format("; {} documents, nothing between them (the tokenizer "
                            "has no <|endoftext|>; --eot ID adds one)",
                            inputs.size()));
}

std::string prepare_shards(const PrepareRequest& req) {
  const fs::path out(req.out_dir);
  // Directories listed once: what is checked below is what is read.
  PrepareRequest files = req;
  files.texts.clear();
  for (PrepareInput& in : prepare_inputs(req.texts)) files.texts.push_back(std::move(in.path));
  std::vector<std::string> inputs = files.texts;
  std::vector<std::string> outputs = {(out / "train.bin").string(), (out / "val.bin").string()};
  const std::string manifest = (out / kManifestName).string();
  if (!req.tokenizer.empty()) {
    inputs.push_back(req.tokenizer);
    outputs.push_back(manifest);
    // The tokenizer's copy beside the shards may be the tokenizer itself: then it is not written.
    const std::string copy = (out / "tokenizer.json").string();
    std::error_code ec;
    if (!fs::equivalent(req.tokenizer, copy, ec)) outputs.push_back(copy);
  } else if (is_trainrun_manifest(manifest)) {
    outputs.push_back(manifest);  // byte-level shards make an earlier tokenized manifest untrue
  }
  check_outputs(inputs, outputs, req.force, "data prepare");
  return req.tokenizer.empty() ? prepare_byte_shards(files) : prepare_token_shards(files);
}

}  // namespace trainrun
