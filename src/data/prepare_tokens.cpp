// `trainrun data prepare --tokenizer`: text files -> train.bin, val.bin and manifest.json. Each
// file is read in blocks of segments cut at split boundaries (text_blocks.h); a block's segments
// are encoded in parallel and written in order, so memory stays at a few blocks whatever the
// input size, and the shards hold exactly the ids of encoding each file whole. Resumable:
// prepare_journal.h records how far it got, at input and block boundaries.
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

#include "document_index.h"
#include "manifest.h"
#include "prepare_inputs.h"
#include "prepare_journal.h"
#include "sha256.h"
#include "shard.h"
#include "text_blocks.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/output_files.h"
#include "trainrun/data/tokenizer.h"
#include "whole_file.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

constexpr size_t kSegmentBytes = size_t{1} << 20;

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
  PrepareFingerprint fp;
  for (const PrepareInput& in : inputs) fp.inputs.push_back(fingerprint_input(in));
  fp.tokenizer = man.tokenizer_sha256;
  fp.tokenizer_path = man.tokenizer_source;
  fp.val_fraction = req.val_fraction;
  fp.eot = eot;
  fp.vocab_size = man.vocab_size;
  fp.dtype = shard_width_for_vocab(man.vocab_size);
  fp.block_bytes = req.block_bytes;
  // Resumable (prepare_journal.h): an interrupted prepare continues from its journal.
  PrepareJournal journal(req.out_dir, std::move(fp), req.force);
  journal.test_hooks(req);
  const PreparePosition& at = journal.start();
  ShardWriter train((out / "train.bin").string(), man.vocab_size,
                    ShardWriter::Partial{static_cast<int64_t>(at.train_tokens)});
  ShardWriter val((out / "val.bin").string(), man.vocab_size,
                  ShardWriter::Partial{static_cast<int64_t>(at.val_tokens)});
  man.dtype = train.width();
  man.inputs = at.done;
  uint64_t file_start = 0;
  for (const ManifestInput& m : man.inputs) file_start += m.bytes;
  uint64_t done = file_start + (at.started ? at.offset : 0);
  const int nt = req.threads > 0 ? req.threads : omp_get_max_threads();
  PrepareProgress progress(req.progress, total, done);
  std::vector<TextSegment> segs;
  std::vector<std::vector<int32_t>> ids;
  for (size_t k = at.inputs_done; k < inputs.size(); ++k) {
    const std::string& path = inputs[k].path;
    // Resumed inside this input: its separator and the first at.offset bytes are written.
    const bool inside = k == at.inputs_done && at.started;
    if (eot >= 0 && file_start > 0 && !inside) {  // between documents, in the split the next
      const auto id = static_cast<int32_t>(eot);  // one starts in
      (file_start >= split ? val : train).append(&id, 1);
    }
    const uint64_t cut = split >= file_start ? split - file_start : 0;
    TextBlocks blocks(path, req.block_bytes, kSegmentBytes, cut);
    ManifestInput in{path, blocks.size(), inside ? at.input_tokens : 0};
    if (inside) blocks.resume(at.offset, at.read_end);
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
      // Inside the input (at its end, the entry between inputs comes next).
      if (blocks.consumed_end() < blocks.size() && journal.boundary(k, false)) {
        PreparePosition p;
        p.inputs_done = k;
        p.started = true;
        p.offset = blocks.consumed_end();
        p.read_end = blocks.read_end();
        p.input_tokens = in.tokens;
        p.train_tokens = train.count();
        p.val_tokens = val.count();
        p.done = man.inputs;
        journal.record(p, train, val);
      }
    }
    file_start += blocks.size();
    man.inputs.push_back(std::move(in));
    if (journal.boundary(k + 1, true)) {
      PreparePosition p;
      p.inputs_done = k + 1;
      p.train_tokens = train.count();
      p.val_tokens = val.count();
      p.done = man.inputs;
      journal.record(p, train, val);
    }
  }
  man.train_tokens = train.count();
  man.val_tokens = val.count();
  if (man.train_tokens == 0 || man.val_tokens == 0) {
    journal.remove(/*discard=*/true);  // running it again would end here again
    throw DataError(fmt::format(
        "the {} split is empty ({} input bytes, val_fraction {}): the text has no piece "
        "boundary on that side of the split; use more text or another --val-fraction",
        man.train_tokens == 0 ? "train" : "val", total, req.val_fraction));
  }
  PreparePosition finished;
  finished.inputs_done = inputs.size();
  finished.train_tokens = man.train_tokens;
  finished.val_tokens = man.val_tokens;
  finished.done = man.inputs;
  finished.finished = true;
  journal.record(finished, train, val);
  // The manifest of shards this prepare replaces goes before they are renamed: a write failing
  // after that (the disk full) must not leave it describing the new shards; the new one is
  // written last, and running the prepare again finishes it.
  if (is_trainrun_manifest((out / kShardManifestName).string()))
    fs::remove(out / kShardManifestName, ec);
  train.commit();
  journal.rename_point();
  val.commit();
  std::vector<uint64_t> input_tokens;
  for (const ManifestInput& m : man.inputs) input_tokens.push_back(m.tokens);
  write_prepared_indexes(req.out_dir, man.vocab_size, eot, input_tokens);
  const std::string tok_copy = (out / man.tokenizer_file).string();
  if (!fs::equivalent(req.tokenizer, tok_copy, ec)) write_file_durably(tok_copy, tok_bytes);
  write_file_durably((out / kShardManifestName).string(), manifest_json(man));
  journal.remove();
  return fmt::format(
             "wrote {} ({} tokens) and val.bin ({} tokens), {} bit tokens, vocab {}, their "
             "document indexes (train.idx, val.idx); manifest {}",
             (out / "train.bin").string(), man.train_tokens, man.val_tokens, 8 * man.dtype,
             man.vocab_size, (out / kShardManifestName).string()) +
         (inputs.size() < 2 ? std::string()
          : eot >= 0
              ? fmt::format("; {} documents, end-of-text id {} between them", inputs.size(), eot)
              : fmt::format("; {} documents, nothing between them (the tokenizer "
                            "has no <|endoftext|>; --eot ID adds one)",
                            inputs.size()));
}

std::string prepare_shards(const PrepareRequest& req) {
  const fs::path out(req.out_dir);
  std::vector<std::string> outputs = {(out / "train.bin").string(), (out / "val.bin").string(),
                                      (out / "train.idx").string(), (out / "val.idx").string()};
  const std::string manifest = (out / kShardManifestName).string();
  if (!req.tokenizer.empty()) {
    outputs.push_back(manifest);
    // The tokenizer's copy beside the shards may be the tokenizer itself: then it is not written.
    const std::string copy = (out / "tokenizer.json").string();
    std::error_code ec;
    if (!fs::equivalent(req.tokenizer, copy, ec)) outputs.push_back(copy);
  } else if (is_trainrun_manifest(manifest)) {
    outputs.push_back(manifest);  // byte-level shards make an earlier tokenized manifest untrue
  }
  // What a prepare writes while it runs (prepare_journal.h): never an input either.
  const std::vector<std::string> partials = {outputs[0] + kPartialSuffix,
                                             outputs[1] + kPartialSuffix};
  std::vector<std::string> all = outputs;
  all.insert(all.end(), partials.begin(), partials.end());
  all.push_back((out / kJournalName).string());
  // Directories listed once, without what this prepare writes: what is checked below is what
  // is read.
  PrepareRequest files = req;
  files.texts.clear();
  for (PrepareInput& in : prepare_inputs(req.texts, all)) files.texts.push_back(std::move(in.path));
  std::vector<std::string> inputs = files.texts;
  if (!req.tokenizer.empty()) inputs.push_back(req.tokenizer);
  check_outputs(inputs, all, /*force=*/true, "data prepare");
  // An interrupted prepare continues (or says why it cannot) without --force: the outputs it
  // may replace are those it was allowed to. Partial shards without its journal are not ours.
  const JournalPeek journal = peek_journal(req.out_dir);
  if (!journal.present) check_outputs(inputs, partials, req.force, "data prepare");
  if (!journal.replaces_outputs || req.force)
    check_outputs(inputs, outputs, req.force, "data prepare");
  return req.tokenizer.empty() ? prepare_byte_shards(files) : prepare_token_shards(files);
}

}  // namespace trainrun
