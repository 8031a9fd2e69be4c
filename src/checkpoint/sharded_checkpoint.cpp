// The reader of formats 3-4's sharded checkpoints (sharded_checkpoint.h): the manifest, then every
// shard file against it.
#include "sharded_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "checkpoint_file.h"
#include "checkpoint_folder.h"
#include "checkpoint_metadata.h"
#include "h5_io.h"
#include "non_finite.h"
#include "trainrun/core/crc32c.h"
#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

using namespace ckpt_io;
namespace fs = std::filesystem;

constexpr const char* kManifestTitle = "trainrun sharded checkpoint";
constexpr const char* kManifestCrcKey = "manifest_crc32c=";
// The data sets of a shard file, each with its CRC-32C attribute; the moments may be absent.
constexpr const char* kDatasets[] = {"weights", "adam_m", "adam_v"};
constexpr const char* kCrcAttrs[] = {"crc32c_weights", "crc32c_adam_m", "crc32c_adam_v"};
constexpr const char* kGroupNames[] = {"model", "optimizer/m", "optimizer/v"};
// Reads check a slab in pieces of 256 KiB: a piece stays in L2 between the CRC and the
// finiteness check.
constexpr size_t kCheckPiece = size_t{1} << 16;

int64_t get_int(hid_t f, const char* name) {
  return get_attr<int64_t>(f, name, H5T_NATIVE_INT64);
}

Handle open_read(const std::string& path) {
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
  return open_readonly(path, fapl);
}

// What a shard file says about itself, checked against what it must be.
struct ShardAttrs {
  int64_t step, rank, world, begin, end, flat_size;
  std::vector<uint32_t> crcs;  // of weights, then adam_m and adam_v when present
};

ShardAttrs read_attrs(hid_t f) {
  if (int64_t v = get_int(f, "format_version");
      v < kOldestShardedFormatVersion || v > kShardedFormatVersion)
    throw H5Failure(fmt::format("format_version {} is not a shard of formats {} to {}", v,
                                kOldestShardedFormatVersion, kShardedFormatVersion));
  ShardAttrs a{get_int(f, "step"),
               get_int(f, "rank"),
               get_int(f, "world_size"),
               get_int(f, "begin"),
               get_int(f, "end"),
               get_int(f, "flat_size"),
               {}};
  for (const char* name : kCrcAttrs)
    if (a.crcs.empty() || check(H5Aexists(f, name), name) > 0)
      a.crcs.push_back(static_cast<uint32_t>(get_int(f, name)));
  return a;
}

void expect(int64_t actual, int64_t want, const char* what, const char* source) {
  if (actual != want)
    throw H5Failure(fmt::format("it holds {} {}, {} says {}", what, actual, source, want));
}

// --- the manifest ------------------------------------------------------------------------

struct ShardLine {
  std::string file;
  int64_t begin = 0, end = 0;
  std::vector<uint32_t> crcs;  // per data set, as in ShardAttrs
};

std::string crc_list(const std::vector<uint32_t>& crcs) {
  std::string out;
  for (uint32_t c : crcs) out += fmt::format("{}{:08x}", out.empty() ? "" : ",", c);
  return out;
}

struct Manifest {
  Header header;
  Layout layout;
  std::vector<ShardLine> shards;
};

template <typename T>
bool parse_field(std::string_view line, std::string_view key, int base, T* out) {
  const size_t at = line.find(key);
  if (at == std::string_view::npos) return false;
  std::string_view v = line.substr(at + key.size());
  v = v.substr(0, v.find(' '));
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out, base);
  return ec == std::errc() && p == v.data() + v.size();
}

Manifest read_manifest(const std::string& dir) {
  const std::string text = read_manifest_text(dir);
  const size_t last = text.rfind(kManifestCrcKey);
  uint32_t stored = 0;
  if (last == std::string::npos || (last > 0 && text[last - 1] != '\n') ||
      !parse_field(std::string_view(text).substr(last, text.find('\n', last) - last),
                   kManifestCrcKey, 16, &stored))
    throw H5Failure("MANIFEST has no checksum line (truncated?)");
  const std::string body = text.substr(0, last);
  if (crc32c(body) != stored) throw H5Failure("MANIFEST fails its CRC-32C (damaged)");
  if (!body.starts_with(std::string(kManifestTitle) + "\n"))
    throw H5Failure("MANIFEST is not a trainrun sharded checkpoint manifest");
  Manifest m;
  std::string metadata;
  std::istringstream lines(body.substr(std::strlen(kManifestTitle) + 1));
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("shard=")) {
      metadata += line + "\n";
      continue;
    }
    ShardLine s;
    s.file = line.substr(6, line.find(' ') - 6);
    const size_t crcs = line.find(" crc32c=");
    bool ok = parse_field(std::string_view(line), " begin=", 10, &s.begin) &&
              parse_field(std::string_view(line), " end=", 10, &s.end) && crcs != std::string::npos;
    for (size_t at = crcs + 8; ok && at < line.size() + 1;) {
      const size_t comma = std::min(line.find(',', at), line.size());
      uint32_t c = 0;
      auto [p, ec] = std::from_chars(line.data() + at, line.data() + comma, c, 16);
      ok = ec == std::errc() && p == line.data() + comma;
      s.crcs.push_back(c);
      at = comma + 1;
    }
    if (!ok) throw H5Failure(fmt::format("MANIFEST: cannot parse `{}`", line));
    m.shards.push_back(std::move(s));
  }
  if (std::string why = parse_metadata_record(metadata, &m.header, &m.layout); !why.empty())
    throw H5Failure("MANIFEST: " + why);
  const Header& h = m.header;
  if (h.format_version < kOldestShardedFormatVersion || h.format_version > kShardedFormatVersion)
    throw H5Failure(
        fmt::format("MANIFEST: format_version {} is not supported (this trainrun "
                    "reads sharded formats {} to {}); use the trainrun version that wrote it",
                    h.format_version, kOldestShardedFormatVersion, kShardedFormatVersion));
  const int world = h.state.world_size;
  if (h.flat_size < 0 || static_cast<int>(m.shards.size()) != world)
    throw H5Failure(
        fmt::format("MANIFEST lists {} shard files for world_size {}", m.shards.size(), world));
  for (int r = 0; r < world; ++r) {
    const Shard want = shard_of(h.flat_size, world, r);
    const ShardLine& s = m.shards[static_cast<size_t>(r)];
    const size_t crcs = m.layout.has_optimizer ? 3 : 1;  // weights, and m and v
    if (s.file != rank_file_name(r, world) || s.begin != want.begin || s.end != want.end ||
        s.crcs.size() != crcs)
      throw H5Failure(fmt::format(
          "MANIFEST: shard {} is `{}` [{}, {}) with {} CRC(s), expected {} [{}, {}) with {}", r,
          s.file, s.begin, s.end, s.crcs.size(), rank_file_name(r, world), want.begin, want.end,
          crcs));
  }
  int64_t end = 0;
  for (const ParamEntry& p : m.layout.params) {
    if (p.offset < end || p.offset > h.flat_size || numel(p.shape) > h.flat_size - p.offset)
      throw H5Failure(
          fmt::format("MANIFEST: parameter {} (offset {}, shape {}) overlaps another "
                      "or lies outside the {} elements",
                      p.name, p.offset, shape_str(p.shape), h.flat_size));
    end = p.offset + numel(p.shape);
  }
  return m;
}

// "model/blocks.0.attn.qkv.weight" for flat element `at` of `group`.
std::string tensor_at(const std::vector<ParamEntry>& params, const char* group, int64_t at) {
  for (const ParamEntry& p : params)
    if (at >= p.offset && at < p.offset + numel(p.shape))
      return fmt::format("{}/{} (element {})", group, p.name, at - p.offset);
  return fmt::format("{} (alignment padding, element {})", group, at);
}

// Reads (keep) or only verifies the checkpoint: all of it, or with `moments` only the optimizer
// moments of that flat range (the files holding none of it are not read for them). Throws
// H5Failure for damage and Unusable for an intact checkpoint that must not be used, naming the
// shard file.
CheckpointData load(const std::string& dir, bool keep, std::optional<Shard> moments) {
  const Manifest m = read_manifest(dir);
  const Header& h = m.header;
  if (std::string why = absurd_value(h); !why.empty()) throw Unusable(why);
  // flat_size sizes the buffers below: bound it by the bytes the shard files really hold (each
  // holds its range of every tensor) before allocating anything.
  uint64_t held = 0;
  for (const ShardLine& line : m.shards) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(fs::path(dir) / line.file, ec);
    if (ec) throw H5Failure(fmt::format("{}: {}", line.file, ec.message()));
    held += size;
  }
  const uint64_t tensors = m.layout.has_optimizer ? 3 : 1;
  if (static_cast<uint64_t>(h.flat_size) > held / (sizeof(float) * tensors))
    throw H5Failure(fmt::format(
        "MANIFEST: flat_size {} needs {} float32 values per tensor, its shard files hold {} "
        "bytes in all: the count is not the files'",
        h.flat_size, h.flat_size, held));
  CheckpointData d;
  d.state = h.state;
  d.params = m.layout.params;
  const Shard all{0, h.flat_size};
  const Shard want = moments.value_or(all);
  if (want.begin < 0 || want.end > h.flat_size || want.begin > want.end)
    throw std::invalid_argument("read_checkpoint: the moments' range lies outside the state");
  if (keep) {
    d.weights.resize(static_cast<size_t>(h.flat_size));  // every element is read below
    if (m.layout.has_optimizer) {
      d.adam_m.resize(static_cast<size_t>(want.size()));
      d.adam_v.resize(static_cast<size_t>(want.size()));
    }
  }
  StateBuffer* outs[] = {&d.weights, &d.adam_m, &d.adam_v};
  for (int r = 0; r < h.state.world_size; ++r) {
    const ShardLine& line = m.shards[static_cast<size_t>(r)];
    const std::string path = (fs::path(dir) / line.file).string();
    try {
      Handle f = open_read(path);
      const ShardAttrs a = read_attrs(f);
      expect(a.step, h.state.step, "step", "MANIFEST");
      expect(a.rank, r, "rank", "its name");
      expect(a.world, h.state.world_size, "world_size", "MANIFEST");
      expect(a.begin, line.begin, "begin", "MANIFEST");
      expect(a.end, line.end, "end", "MANIFEST");
      if (a.crcs != line.crcs)
        throw H5Failure(fmt::format("it holds crc32c {}, MANIFEST says {}", crc_list(a.crcs),
                                    crc_list(line.crcs)));
      const size_t n = static_cast<size_t>(line.end - line.begin);
      // The part of this file's range a kept tensor needs: all of it for the weights, the
      // overlap with `want` for the moments.
      const int64_t lo = std::max(line.begin, want.begin), hi = std::min(line.end, want.end);
      // All the wanted data sets of this file in one read pipeline, each checked slab by slab
      // as it arrives (CRC-32C, finiteness) and copied into place.
      std::vector<FloatsRead> reads;
      std::vector<size_t> read_sets;  // t of each read
      uint32_t crc[3] = {0, 0, 0};
      size_t seen[3] = {0, 0, 0};  // elements of data set t checked so far (slabs come in order)
      for (size_t t = 0; t < line.crcs.size(); ++t) {
        const bool whole = t == 0 || (lo <= line.begin && hi >= line.end);
        if (t > 0 && lo >= hi && line.begin != line.end) continue;  // none of it is wanted
        // Straight into place when the whole file range is kept; else through a slab buffer,
        // copying the wanted part.
        float* direct =
            keep && whole ? outs[t]->data() + (line.begin - (t ? want.begin : 0)) : nullptr;
        reads.push_back(
            {kDatasets[t], direct, n, [&, t, direct](const float* p, size_t k) {
               for (size_t at = 0; at < k; at += kCheckPiece) {
                 const size_t m = std::min(kCheckPiece, k - at);
                 crc[t] = crc32c(
                     std::string_view(reinterpret_cast<const char*>(p + at), m * sizeof(float)),
                     crc[t]);
                 if (std::optional<NonFinite> nf = find_non_finite(p + at, m)) {
                   nf->first += seen[t] + at;
                   throw Unusable(fmt::format(
                       "{}: {}", line.file,
                       non_finite_message(tensor_at(d.params, kGroupNames[t],
                                                    line.begin + static_cast<int64_t>(nf->first)),
                                          *nf, n)));
                 }
               }
               if (keep && !direct) {  // copy [lo, hi) of the flat state from here
                 const int64_t s0 = line.begin + static_cast<int64_t>(seen[t]);
                 const int64_t b = std::max(s0, lo), e = std::min(s0 + static_cast<int64_t>(k), hi);
                 if (b < e)
                   std::copy(p + (b - s0), p + (e - s0), outs[t]->data() + (b - want.begin));
               }
               seen[t] += k;
             }});
        read_sets.push_back(t);
      }
      read_floats_contiguous(f, reads);
      for (size_t t : read_sets)
        if (crc[t] != line.crcs[t])
          throw H5Failure(fmt::format("/{}'s CRC-32C is {:08x}, MANIFEST says {:08x}", kDatasets[t],
                                      crc[t], line.crcs[t]));
      if (r == 0) {
        d.state.config_yaml = read_text(f, "config");
        if (d.state.config_yaml.size() != m.layout.config_bytes)
          throw H5Failure("/config's size differs from the manifest's config_bytes");
      }
      f.close("close");
    } catch (const Unusable&) {
      throw;
    } catch (const H5Failure& e) {
      throw H5Failure(fmt::format("{}: {}", line.file, e.what()));
    }
  }
  return d;
}

}  // namespace

Verdict judge_sharded(const std::string& dir, CheckpointData* data) {
  quiet();
  return verdict_of([&] { return Loaded{load(dir, data != nullptr, std::nullopt), ""}; }, data);
}

std::string describe_sharded(const std::string& dir) {
  quiet();
  std::string out = "layout: sharded (a folder: one file per rank, and MANIFEST)\n";
  try {
    const Manifest m = read_manifest(dir);
    const Header& h = m.header;
    const TrainState& s = h.state;
    out += fmt::format(
        "format_version: {}\ntrainrun_version: {}\ncreated: {}\nstep: {}\ntokens_seen: {}\n"
        "samples_seen: {}\nseed: {}\nworld_size: {}\nrestarts: {}\nbad_steps_total: {}\n"
        "lr_scale: {}\n",
        h.format_version, h.trainrun_version, h.created, s.step, s.tokens_seen, s.samples_seen,
        s.seed, s.world_size, s.restarts, s.bad_steps_total, s.lr_scale);
    out += fmt::format("parameters: {} tensors (flat size {}), optimizer moments: {}\n",
                       h.param_count, h.flat_size, m.layout.has_optimizer ? "yes" : "no");
    out += "files (float32, contiguous; CRC-32C of weights, m, v in MANIFEST):\n";
    for (const ShardLine& l : m.shards) {
      std::error_code ec;
      const auto size = fs::file_size(fs::path(dir) / l.file, ec);
      out += fmt::format("  {} [{}, {}) crc32c {}, {}\n", l.file, l.begin, l.end, crc_list(l.crcs),
                         ec ? "missing" : fmt::format("{:.1f} MiB", double(size) / (1 << 20)));
    }
  } catch (const H5Failure& e) {
    out += fmt::format("manifest unreadable: {}\n", e.what());
  }
  return out;
}

}  // namespace trainrun
