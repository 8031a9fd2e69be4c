// `trainrun data prepare` without a tokenizer: every byte is a token (vocabulary 256). The files
// are streamed in blocks into train.bin and val.bin with the end-of-text id between them, so a
// corpus is bounded by the disk, not by memory (it was read whole, and refused past 4 GiB).
// Resumable: prepare_journal.h records how far it got, at input and block boundaries.
#include <fmt/format.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "document_index.h"
#include "manifest.h"
#include "prepare_inputs.h"
#include "prepare_journal.h"
#include "shard.h"
#include "split.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/tokenizer.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

constexpr size_t kBlockBytes = size_t{16} << 20;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

std::string prepare_byte_shards(const PrepareRequest& req) {
  if (!(req.val_fraction > 0.0 && req.val_fraction < 1.0))
    throw DataError(fmt::format("val_fraction={} must be in (0, 1)", req.val_fraction));
  const std::vector<PrepareInput> inputs = prepare_inputs(req.texts);
  const int64_t eot = req.eot == kEotAuto ? 0 : req.eot;
  if (eot > 255)
    throw ConfigError(fmt::format(
        "--eot {}: byte-level shards hold ids 0-255; pass a byte value, `none`, or --tokenizer",
        eot));
  int64_t total = eot >= 0 ? static_cast<int64_t>(inputs.size()) - 1 : 0;
  for (const PrepareInput& in : inputs) total += static_cast<int64_t>(in.bytes);
  if (total < 2)
    throw DataError(
        fmt::format("{}: {} byte(s) of text, too few to split into train and val; use more text",
                    inputs.front().path, total));
  const int64_t ntrain = std::clamp<int64_t>(train_length(total, req.val_fraction), 1, total - 1);

  create_output_directory(req.out_dir);
  std::error_code ec;
  const fs::path out(req.out_dir);
  const size_t block_bytes = std::clamp<size_t>(req.block_bytes, 1, kBlockBytes);
  PrepareFingerprint fp;
  for (const PrepareInput& in : inputs) fp.inputs.push_back(fingerprint_input(in));
  fp.val_fraction = req.val_fraction;
  fp.eot = eot;
  fp.vocab_size = 256;
  fp.dtype = 1;
  fp.block_bytes = block_bytes;
  // Resumable (prepare_journal.h): an interrupted prepare continues from its journal.
  PrepareJournal journal(req.out_dir, std::move(fp), req.force);
  journal.test_hooks(req);
  const PreparePosition& at = journal.start();
  ShardWriter train((out / "train.bin").string(), 256,
                    ShardWriter::Partial{static_cast<int64_t>(at.train_tokens)});
  ShardWriter val((out / "val.bin").string(), 256,
                  ShardWriter::Partial{static_cast<int64_t>(at.val_tokens)});
  int64_t pos = static_cast<int64_t>(train.count() + val.count());
  const auto put = [&](const int32_t* ids, int64_t n) {
    const int64_t k = std::clamp<int64_t>(ntrain - pos, 0, n);
    if (k > 0) train.append(ids, static_cast<size_t>(k));
    if (n > k) val.append(ids + k, static_cast<size_t>(n - k));
    pos += n;
  };
  const auto boundary = [&](size_t inputs_done, bool started, uint64_t offset) {
    if (!journal.boundary(inputs_done, !started)) return;
    PreparePosition p;
    p.inputs_done = inputs_done;
    p.started = started;
    p.offset = offset;
    p.train_tokens = train.count();
    p.val_tokens = val.count();
    journal.record(p, train, val);
  };
  PrepareProgress progress(req.progress, static_cast<uint64_t>(total), static_cast<uint64_t>(pos));
  std::vector<unsigned char> block(block_bytes);
  std::vector<int32_t> ids(block_bytes);
  for (size_t i = at.inputs_done; i < inputs.size(); ++i) {
    // Resumed inside this input: its separator and first `offset` bytes are written.
    const bool inside = i == at.inputs_done && at.started;
    if (i > 0 && eot >= 0 && !inside) {
      const auto id = static_cast<int32_t>(eot);
      put(&id, 1);
    }
    const PrepareInput& in = inputs[i];
    const std::unique_ptr<std::FILE, FileCloser> f(std::fopen(in.path.c_str(), "rb"));
    if (!f)
      throw DataError(fmt::format("{}: cannot read the text file ({}); fix the path", in.path,
                                  std::strerror(errno)));
    uint64_t offset = inside ? std::min(at.offset, in.bytes) : 0;
    if (offset > 0 && ::fseeko(f.get(), static_cast<off_t>(offset), SEEK_SET) != 0)
      throw DataError(
          fmt::format("{}: cannot seek to byte {} ({})", in.path, offset, std::strerror(errno)));
    // Only the size it had when listed: a file that grows while it is read stops there.
    for (uint64_t left = in.bytes - offset; left > 0;) {
      const size_t n = std::fread(block.data(), 1, std::min<uint64_t>(left, block.size()), f.get());
      if (n == 0)
        throw DataError(fmt::format(
            "{}: {} while reading it ({} of {} bytes read); prepare again once it is stable",
            in.path, std::ferror(f.get()) ? "a read error" : "it shrank", in.bytes - left,
            in.bytes));
      std::copy(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(n), ids.begin());
      put(ids.data(), static_cast<int64_t>(n));
      left -= n;
      offset += n;
      progress.update(static_cast<uint64_t>(pos), static_cast<uint64_t>(pos));
      if (left > 0) boundary(i, true, offset);
    }
    boundary(i + 1, false, 0);
  }
  PreparePosition finished;
  finished.inputs_done = inputs.size();
  finished.train_tokens = train.count();
  finished.val_tokens = val.count();
  finished.finished = true;
  journal.record(finished, train, val);
  // A tokenized prepare's manifest no longer describes these shards: removed before they are
  // renamed (a write failing after that, the disk full, must not leave it beside them), but
  // only when it is trainrun's (a dataset's own manifest.json is not ours to delete; shards
  // ignore it).
  if (is_trainrun_manifest((out / kShardManifestName).string()))
    fs::remove(out / kShardManifestName, ec);
  train.commit();
  journal.rename_point();
  val.commit();
  std::vector<uint64_t> input_tokens;
  for (const PrepareInput& in : inputs) input_tokens.push_back(in.bytes);
  write_prepared_indexes(req.out_dir, 256, eot, input_tokens);
  journal.remove();
  std::string summary = fmt::format(
      "wrote {} ({} tokens) and val.bin ({} tokens), and their document indexes (train.idx, "
      "val.idx)",
      (out / "train.bin").string(), train.count(), val.count());
  if (inputs.size() > 1)
    summary +=
        eot >= 0
            ? fmt::format("; {} documents, end-of-text byte {} between them", inputs.size(), eot)
            : fmt::format("; {} files, nothing between them (--eot none)", inputs.size());
  return summary;
}

}  // namespace trainrun
