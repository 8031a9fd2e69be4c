// `trainrun data prepare` without a tokenizer: every byte is a token (vocabulary 256). The files
// are streamed in blocks into train.bin and val.bin with the end-of-text id between them, so a
// corpus is bounded by the disk, not by memory (it was read whole, and refused past 4 GiB).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "manifest.h"
#include "prepare_inputs.h"
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
  ShardWriter train((out / "train.bin").string(), 256);
  ShardWriter val((out / "val.bin").string(), 256);
  int64_t pos = 0;
  const auto put = [&](const int32_t* ids, int64_t n) {
    const int64_t k = std::clamp<int64_t>(ntrain - pos, 0, n);
    if (k > 0) train.append(ids, static_cast<size_t>(k));
    if (n > k) val.append(ids + k, static_cast<size_t>(n - k));
    pos += n;
  };
  PrepareProgress progress(req.progress, static_cast<uint64_t>(total));
  std::vector<unsigned char> block(kBlockBytes);
  std::vector<int32_t> ids(kBlockBytes);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0 && eot >= 0) {
      const auto id = static_cast<int32_t>(eot);
      put(&id, 1);
    }
    const PrepareInput& in = inputs[i];
    const std::unique_ptr<std::FILE, FileCloser> f(std::fopen(in.path.c_str(), "rb"));
    if (!f)
      throw DataError(fmt::format("{}: cannot read the text file ({}); fix the path", in.path,
                                  std::strerror(errno)));
    // Only the size it had when listed: a file that grows while it is read stops there.
    for (uint64_t left = in.bytes; left > 0;) {
      const size_t n = std::fread(block.data(), 1, std::min<uint64_t>(left, block.size()), f.get());
      if (n == 0)
        throw DataError(fmt::format(
            "{}: {} while reading it ({} of {} bytes read); prepare again once it is stable",
            in.path, std::ferror(f.get()) ? "a read error" : "it shrank", in.bytes - left,
            in.bytes));
      std::copy(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(n), ids.begin());
      put(ids.data(), static_cast<int64_t>(n));
      left -= n;
      progress.update(static_cast<uint64_t>(pos), static_cast<uint64_t>(pos));
    }
  }
  train.commit();
  val.commit();
  // A tokenized prepare's manifest no longer describes these shards: remove it, but only when it
  // is trainrun's (a dataset's own manifest.json is not ours to delete; shards ignore it).
  if (is_trainrun_manifest((out / kManifestName).string())) fs::remove(out / kManifestName, ec);
  std::string summary = fmt::format("wrote {} ({} tokens) and val.bin ({} tokens)",
                                    (out / "train.bin").string(), train.count(), val.count());
  if (inputs.size() > 1)
    summary +=
        eot >= 0
            ? fmt::format("; {} documents, end-of-text byte {} between them", inputs.size(), eot)
            : fmt::format("; {} files, nothing between them (--eot none)", inputs.size());
  return summary;
}

}  // namespace trainrun
