// One checkpoint = one HDF5 file (layout in docs/checkpoint-format.md): written under a temporary
// name and renamed, every dataset checksummed, the root attributes copied into a checksummed
// dataset, read back by parameter offsets. Reading and verifying are one function, load().
#include "checkpoint_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>

#include "checkpoint_metadata.h"
#include "h5_io.h"
#include "non_finite.h"
#include "reserved_file.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/checkpoint/h5_handle.h"
#include "trainrun/core/build_info.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

using namespace h5;
using namespace ckpt_io;
namespace fs = std::filesystem;

void write_floats(hid_t parent, const ParamEntry& p, const float* flat) {
  std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
  write_dataset(parent, p.name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, dims, flat + p.offset,
                sizeof(float));
  Handle ds = dset_h(H5Dopen2(parent, p.name.c_str(), H5P_DEFAULT), p.name.c_str());
  put_attr<int64_t>(ds, "offset", H5T_NATIVE_INT64, p.offset);
}

// --- metadata ---------------------------------------------------------------------------

Header header_of(const CheckpointData& d) {
  Header h;
  h.state = d.state;
  h.state.config_yaml.clear();
  h.format_version = kCheckpointFormatVersion;
  h.trainrun_version = trainrun_version();
  h.created = iso_now();
  h.flat_size = int64_t(d.weights.size());
  h.param_count = int64_t(d.params.size());
  return h;
}

Layout layout_of(const CheckpointData& d) {
  Layout l;
  l.params = d.params;
  std::sort(l.params.begin(), l.params.end(),
            [](const ParamEntry& a, const ParamEntry& b) { return a.offset < b.offset; });
  l.has_optimizer = !d.adam_m.empty();
  l.config_bytes = d.state.config_yaml.size();
  return l;
}

void write_header(hid_t f, const Header& h) {
  const TrainState& s = h.state;
  put_attr<int64_t>(f, "format_version", H5T_NATIVE_INT64, h.format_version);
  put_attr_str(f, "trainrun_version", h.trainrun_version);
  put_attr<int64_t>(f, "step", H5T_NATIVE_INT64, s.step);
  put_attr<int64_t>(f, "tokens_seen", H5T_NATIVE_INT64, s.tokens_seen);
  put_attr<int64_t>(f, "samples_seen", H5T_NATIVE_INT64, s.samples_seen);
  put_attr<uint64_t>(f, "seed", H5T_NATIVE_UINT64, s.seed);
  put_attr<int64_t>(f, "bad_steps_total", H5T_NATIVE_INT64, s.bad_steps_total);
  put_attr<int64_t>(f, "restarts", H5T_NATIVE_INT64, s.restarts);
  put_attr<double>(f, "lr_scale", H5T_NATIVE_DOUBLE, s.lr_scale);
  put_attr<int64_t>(f, "world_size", H5T_NATIVE_INT64, s.world_size);
  put_attr_str(f, "created", h.created);
  put_attr<int64_t>(f, "flat_size", H5T_NATIVE_INT64, h.flat_size);
  put_attr<int64_t>(f, "param_count", H5T_NATIVE_INT64, h.param_count);
}

// Reads the root attributes as they are; judging them is load()'s business.
Header read_header(hid_t f) {
  // Loads the root object header, so that damage to it is reported as what it is rather than
  // under the name of the first attribute read.
  H5G_info_t root{};
  check(H5Gget_info(f, &root), "read the root group's header (its attributes and links)");
  Header h;
  h.format_version = get_attr<int64_t>(f, "format_version", H5T_NATIVE_INT64);
  if (h.format_version < kOldestCheckpointFormatVersion ||
      h.format_version > kCheckpointFormatVersion)
    throw H5Failure(fmt::format(
        "format_version {} is not supported (this trainrun reads formats {} to {}); use the "
        "trainrun version that wrote it",
        h.format_version, kOldestCheckpointFormatVersion, kCheckpointFormatVersion));
  h.trainrun_version = get_attr_str(f, "trainrun_version");
  h.created = get_attr_str(f, "created");
  TrainState& s = h.state;
  s.step = get_attr<int64_t>(f, "step", H5T_NATIVE_INT64);
  s.tokens_seen = get_attr<int64_t>(f, "tokens_seen", H5T_NATIVE_INT64);
  s.samples_seen = get_attr<int64_t>(f, "samples_seen", H5T_NATIVE_INT64);
  s.seed = get_attr<uint64_t>(f, "seed", H5T_NATIVE_UINT64);
  s.bad_steps_total = get_attr<int64_t>(f, "bad_steps_total", H5T_NATIVE_INT64);
  s.restarts = get_attr<int64_t>(f, "restarts", H5T_NATIVE_INT64);
  s.lr_scale = get_attr<double>(f, "lr_scale", H5T_NATIVE_DOUBLE);
  // Stored as int64: a value beyond int must not be silently cut to one that looks right.
  const int64_t world = get_attr<int64_t>(f, "world_size", H5T_NATIVE_INT64);
  s.world_size = int(std::clamp<int64_t>(world, -1, std::numeric_limits<int>::max()));
  h.flat_size = get_attr<int64_t>(f, "flat_size", H5T_NATIVE_INT64);
  h.param_count = get_attr<int64_t>(f, "param_count", H5T_NATIVE_INT64);
  return h;
}

// --- writing ----------------------------------------------------------------------------

void validate_for_write(const CheckpointData& d) {
  const size_t n = d.weights.size();
  if (!d.adam_m.empty() && d.adam_m.size() != n)
    throw H5Failure(fmt::format("adam_m has {} elements, weights {}", d.adam_m.size(), n));
  if (!d.adam_v.empty() && d.adam_v.size() != n)
    throw H5Failure(fmt::format("adam_v has {} elements, weights {}", d.adam_v.size(), n));
  if (d.adam_m.empty() != d.adam_v.empty())
    throw H5Failure("adam_m and adam_v must both be present or both be empty");
  for (const ParamEntry& p : d.params) {
    if (p.name.empty() || p.name.find('/') != std::string::npos || p.name == "." || p.name == "..")
      throw H5Failure(fmt::format("parameter name '{}' is not usable as a dataset name", p.name));
    for (int64_t dim : p.shape)
      if (dim < 0) throw H5Failure(fmt::format("parameter {} has a negative dimension", p.name));
    if (p.offset < 0 || size_t(p.offset + numel(p.shape)) > n)
      throw H5Failure(fmt::format("parameter {} (offset {}, shape {}) lies outside the {} weights",
                                  p.name, p.offset, shape_str(p.shape), n));
  }
  // A reader would refuse such a file: refuse to write it.
  if (std::string why = absurd_value(header_of(d)); !why.empty()) throw H5Failure(why);
}

// An upper bound on the size of the file write_file makes from `d`: the chunks of every
// dataset, plus a generous allowance per object for its header, attributes and chunk index
// (a few hundred bytes in practice), plus the superblock and root group.
uint64_t file_size_bound(const CheckpointData& d, const std::string& metadata) {
  constexpr uint64_t kPerObject = 4096, kBase = 64 * 1024;
  const uint64_t tensors = d.adam_m.empty() ? 1 : 3;
  uint64_t bytes = kBase + kPerObject * (8 + tensors * d.params.size());
  bytes += stored_bytes({hsize_t(metadata.size())}, 1);
  bytes += stored_bytes({hsize_t(d.state.config_yaml.size())}, 1);
  for (const ParamEntry& p : d.params)
    bytes += tensors * stored_bytes({p.shape.begin(), p.shape.end()}, sizeof(float));
  return bytes;
}

// Writes the checkpoint into `file`, which create_reserved_file made: every write lands in
// reserved space, so HDF5 never meets a full disk (its close would not survive one).
void write_file(const std::string& file, const CheckpointData& d) {
  const Header h = header_of(d);
  const std::string metadata = metadata_record(h, layout_of(d));
  create_reserved_file(file, empty_file_image(), file_size_bound(d, metadata));
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  set_write_access(fapl);
  Handle f = file_h(H5Fopen(file.c_str(), H5F_ACC_RDWR, fapl), "open reserved file");
  write_header(f, h);
  write_text(f, "metadata", metadata);
  write_text(f, "config", d.state.config_yaml);

  Handle model = group_h(H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "model");
  for (const ParamEntry& p : d.params) write_floats(model, p, d.weights.data());
  if (!d.adam_m.empty()) {
    Handle opt =
        group_h(H5Gcreate2(f, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "optimizer");
    Handle m = group_h(H5Gcreate2(opt, "m", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "m");
    for (const ParamEntry& p : d.params) write_floats(m, p, d.adam_m.data());
    Handle v = group_h(H5Gcreate2(opt, "v", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "v");
    for (const ParamEntry& p : d.params) write_floats(v, p, d.adam_v.data());
  }
  model.reset();
  check(H5Fflush(f, H5F_SCOPE_GLOBAL), "flush file");
  f.close("close file");
}

// --- reading ----------------------------------------------------------------------------

// The parameter table of one group of per-parameter datasets, from their headers alone: the
// entries sorted by offset, checked to lie inside the flat buffer without overlap.
std::vector<ParamEntry> read_table(hid_t f, const char* path, const Header& h) {
  Handle g = open_group(f, path);
  std::vector<ParamEntry> params;
  for (std::string& name : member_names(g)) {
    // The storage checks bound the shape by the bytes really stored, before anything is sized
    // by it.
    Handle ds = open_dataset(g, name, Storage::checksummed);
    ParamEntry p;
    p.shape = dataset_shape(ds);
    p.offset = get_attr<int64_t>(ds, "offset", H5T_NATIVE_INT64);
    p.name = std::move(name);
    if (p.offset < 0 || p.offset > h.flat_size || numel(p.shape) > h.flat_size - p.offset)
      throw H5Failure(fmt::format("{}/{} (offset {}, shape {}) lies outside the {} elements", path,
                                  p.name, p.offset, shape_str(p.shape), h.flat_size));
    params.push_back(std::move(p));
  }
  if (int64_t(params.size()) != h.param_count)
    throw H5Failure(fmt::format("{} holds {} datasets, the header says {}", path, params.size(),
                                h.param_count));
  std::sort(params.begin(), params.end(),
            [](const ParamEntry& a, const ParamEntry& b) { return a.offset < b.offset; });
  int64_t end = 0;
  const ParamEntry* prev = nullptr;
  for (const ParamEntry& p : params) {
    if (p.offset < end)
      throw H5Failure(fmt::format("{}/{} overlaps {}", path, p.name, prev ? prev->name : ""));
    end = p.offset + numel(p.shape);
    prev = &p;
  }
  return params;
}

bool same_layout(const std::vector<ParamEntry>& a, const std::vector<ParamEntry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].shape != b[i].shape || a[i].offset != b[i].offset)
      return false;
  return true;
}

// Where to read a dataset's data into: the flat buffer, or (when verifying) scratch space.
using Sink = std::function<float*(const ParamEntry&)>;

// Reads every tensor of a group (checking its checksums) and refuses a non-finite value.
void read_data(hid_t f, const char* path, const std::vector<ParamEntry>& params, const Sink& sink) {
  Handle g = open_group(f, path);
  for (const ParamEntry& p : params) {
    const size_t n = size_t(numel(p.shape));
    if (n == 0) continue;
    Handle ds = open_dataset(g, p.name, Storage::checksummed);
    float* out = sink(p);
    check(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
          fmt::format("read {}/{}", path, p.name).c_str());
    if (std::optional<NonFinite> nf = find_non_finite(out, n))
      throw Unusable(non_finite_message(fmt::format("{}/{}", path, p.name), *nf, n));
  }
}

// Format 2: the attributes and parameter table must equal their checksummed copy. Returns a
// caveat for a format 1 file, which has none.
std::string check_metadata(hid_t f, const Header& h, const Layout& layout) {
  if (h.format_version < 2)
    return "format 1: the metadata (step, lr_scale, ...) is not covered by a checksum; the data "
           "is";
  const std::string stored = read_text(f, "metadata");
  const std::string actual = metadata_record(h, layout);
  if (stored != actual)
    throw H5Failure(
        "a root attribute or the parameter table does not match its checksummed "
        "copy (/metadata): " +
        first_difference(actual, stored));
  return "";
}

// The one verification behind read_checkpoint and verify_checkpoint (and so inspect, resume,
// rollback and the supervisor). Reads (keep == true) or only verifies the whole file: checksums
// of the metadata first, then whether its values make sense, then every tensor's checksum and
// finiteness. Throws H5Failure for damage, Unusable for an intact file that must not be used.
Loaded load(const std::string& path, bool keep) {
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
  Handle f = open_readonly(path, fapl);
  const Header h = read_header(f);
  if (h.flat_size < 0 || h.param_count < 0) throw H5Failure("negative flat_size or param_count");
  Loaded out;
  CheckpointData& d = out.data;
  d.state = h.state;
  d.state.config_yaml = read_text(f, "config");

  Layout layout;
  layout.params = read_table(f, "model", h);
  layout.has_optimizer = check(H5Lexists(f, "optimizer", H5P_DEFAULT), "look up optimizer") > 0;
  layout.config_bytes = d.state.config_yaml.size();
  if (layout.has_optimizer && (!same_layout(layout.params, read_table(f, "optimizer/m", h)) ||
                               !same_layout(layout.params, read_table(f, "optimizer/v", h))))
    throw H5Failure("optimizer moments do not match the model's parameters");
  out.note = check_metadata(f, h, layout);
  if (std::string why = absurd_value(h); !why.empty()) throw Unusable(why);
  // The tensors are stored back to back from offset 0 (ParamStore's flat buffer): a flat_size
  // beyond the last one counts elements the file does not hold, and sizes the reader's buffers.
  const int64_t stored =
      layout.params.empty() ? 0 : layout.params.back().offset + numel(layout.params.back().shape);
  if (h.flat_size > stored)
    throw H5Failure(fmt::format(
        "flat_size {} exceeds the {} elements its tensors hold: the count is not the file's",
        h.flat_size, stored));

  std::vector<float> scratch;
  auto into = [&](StateBuffer& flat) -> Sink {
    if (keep) {
      flat.assign(size_t(h.flat_size), 0.0f);
      return [&flat](const ParamEntry& p) { return flat.data() + p.offset; };
    }
    return [&scratch](const ParamEntry& p) {
      scratch.resize(std::max(scratch.size(), size_t(numel(p.shape))));
      return scratch.data();
    };
  };
  read_data(f, "model", layout.params, into(d.weights));
  if (layout.has_optimizer) {
    read_data(f, "optimizer/m", layout.params, into(d.adam_m));
    read_data(f, "optimizer/v", layout.params, into(d.adam_v));
  }
  d.params = std::move(layout.params);
  f.close("close");
  return out;
}

// Everything the headers tell, which may survive damage to the data.
std::string describe_headers(const std::string& path) {
  Handle f = open_readonly(path, H5P_DEFAULT);
  Header h = read_header(f);
  const TrainState& s = h.state;
  std::string out = fmt::format("format_version: {}\ntrainrun_version: {}\ncreated: {}\n",
                                h.format_version, h.trainrun_version, h.created);
  out += fmt::format(
      "step: {}\ntokens_seen: {}\nsamples_seen: {}\nseed: {}\nworld_size: {}\n"
      "restarts: {}\nbad_steps_total: {}\nlr_scale: {}\n",
      s.step, s.tokens_seen, s.samples_seen, s.seed, s.world_size, s.restarts, s.bad_steps_total,
      s.lr_scale);
  out += h.format_version >= 2
             ? "metadata checksum: yes (a copy in /metadata, fletcher32)\n"
             : "metadata checksum: none (format 1; only the data is checksummed)\n";
  int64_t total = 0;
  std::vector<std::string> lines;
  for (const char* group : {"model", "optimizer/m", "optimizer/v"}) {
    if (check(H5Lexists(f, group[0] == 'o' ? "optimizer" : group, H5P_DEFAULT), group) <= 0)
      continue;
    Handle g = open_group(f, group);
    for (const std::string& name : member_names(g)) {
      try {
        Handle ds = open_dataset(g, name, Storage::checksummed);
        std::vector<int64_t> shape = dataset_shape(ds);
        if (group[0] == 'm') total += numel(shape);
        lines.push_back(fmt::format("  /{}/{} {}", group, name, shape_str(shape)));
      } catch (const H5Failure& e) {  // the verdict refuses the file for it
        lines.push_back(fmt::format("  /{}/{} REFUSED: {}", group, name, e.what()));
      }
    }
  }
  out += fmt::format("parameters: {} in {} tensors (flat size {})\n", total, h.param_count,
                     h.flat_size);
  out += "datasets (float32, chunked, fletcher32):\n  /config (resolved YAML)\n";
  if (h.format_version >= 2) out += "  /metadata (the root attributes and parameter table)\n";
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

}  // namespace

Verdict verdict_of(const std::function<Loaded()>& load, CheckpointData* data) {
  Verdict v;
  try {
    Loaded l = load();
    v.ok = true;
    v.step = l.data.state.step;
    v.note = std::move(l.note);
    if (data) *data = std::move(l.data);
  } catch (const Unusable& e) {
    v.unusable = true;
    v.reason = e.what();
  } catch (const H5Failure& e) {
    v.reason = e.what();
  } catch (const std::bad_alloc&) {
    v.reason = "its sizes do not fit in memory";
  }
  return v;
}

void write_checkpoint(const std::string& path, const CheckpointData& data) {
  if (std::string why = non_finite_reason(data); !why.empty())
    throw NonFiniteCheckpoint(fmt::format("not writing checkpoint {}: {}", path, why));
  quiet();
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    validate_for_write(data);
  } catch (const H5Failure& e) {
    throw CheckpointError(fmt::format("cannot write checkpoint {}: {}", path, e.what()));
  }
  ::unlink(tmp.c_str());  // a leftover of an earlier process with our pid
  try {
    auto t0 = std::chrono::steady_clock::now();
    write_file(tmp, data);
    auto t1 = std::chrono::steady_clock::now();
    fsync_path(tmp, false);
    auto t2 = std::chrono::steady_clock::now();
    spdlog::debug("checkpoint {}: {:.1f} MB written in {:.2f} s, fsync {:.2f} s", path,
                  double(data.weights.size() * 3 * sizeof(float)) / 1e6,
                  std::chrono::duration<double>(t1 - t0).count(),
                  std::chrono::duration<double>(t2 - t1).count());
    rename_durably(tmp, path);
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    throw CheckpointWriteError(fmt::format("cannot write checkpoint {}: {}", path, e.what()));
  }
}

Verdict judge_file(const std::string& path, CheckpointData* data) {
  quiet();
  return verdict_of([&] { return load(path, data != nullptr); }, data);
}

std::string describe_file(const std::string& path) {
  quiet();
  std::string out;
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (!ec) out += fmt::format("size: {:.1f} MiB ({} bytes)\n", double(size) / (1 << 20), size);
  try {
    out += describe_headers(path);
  } catch (const H5Failure& e) {
    out += fmt::format("metadata unreadable: {}\n", e.what());
  }
  return out;
}

}  // namespace trainrun
