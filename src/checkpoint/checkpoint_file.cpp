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
#include "non_finite.h"
#include "reserved_file.h"
#include "trainrun/checkpoint.h"
#include "trainrun/errors.h"
#include "trainrun/h5_handle.h"

#ifndef TRAINRUN_VERSION
#define TRAINRUN_VERSION "unknown"
#endif

namespace trainrun {
namespace {

using namespace h5;
namespace fs = std::filesystem;

// An intact file whose content must not be used: a non-finite value, an absurd attribute.
// (Damage, i.e. a checksum or structure failure, is an H5Failure.)
struct Unusable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Chunks of up to 1M elements (4 MiB): large enough that the filter pipeline runs at disk
// speed, small enough that one damaged chunk does not hide much, and a chunk bypasses
// HDF5's 1 MiB chunk cache, so writes go straight to the file.
constexpr hsize_t kChunkElems = hsize_t{1} << 20;
// Each H5Dwrite covers at most this many elements (16 MiB). The thread-safe HDF5 holds one
// global lock per call; bounded writes let the training thread's metric appends interleave
// with a background checkpoint instead of waiting for a whole embedding table.
constexpr hsize_t kSlabElems = hsize_t{4} << 20;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// --- attributes -------------------------------------------------------------------------

template <typename T>
void put_attr(hid_t obj, const char* name, hid_t type, T value) {
  Handle space = space_h(H5Screate(H5S_SCALAR), "create attribute space");
  Handle a = attr_h(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), name);
  check(H5Awrite(a, type, &value), name);
}

void put_attr_str(hid_t obj, const char* name, const std::string& value) {
  Handle type = type_h(H5Tcopy(H5T_C_S1), "copy string type");
  check(H5Tset_size(type, std::max<size_t>(1, value.size())), "set string size");
  check(H5Tset_strpad(type, H5T_STR_NULLPAD), "set string padding");
  Handle space = space_h(H5Screate(H5S_SCALAR), "create attribute space");
  Handle a = attr_h(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), name);
  std::string padded = value;
  padded.resize(std::max<size_t>(1, value.size()), '\0');
  check(H5Awrite(a, type, padded.data()), name);
}

template <typename T>
T get_attr(hid_t obj, const char* name, hid_t type) {
  if (check(H5Aexists(obj, name), name) == 0)
    throw H5Failure(fmt::format("attribute '{}' is missing", name));
  Handle a = attr_h(H5Aopen(obj, name, H5P_DEFAULT), name);
  T value{};
  check(H5Aread(a, type, &value), name);
  return value;
}

std::string get_attr_str(hid_t obj, const char* name) {
  if (check(H5Aexists(obj, name), name) == 0)
    throw H5Failure(fmt::format("attribute '{}' is missing", name));
  Handle a = attr_h(H5Aopen(obj, name, H5P_DEFAULT), name);
  Handle ftype = type_h(H5Aget_type(a), name);
  if (H5Tget_class(ftype) != H5T_STRING || H5Tis_variable_str(ftype) != 0)
    throw H5Failure(fmt::format("attribute '{}' is not a fixed-length string", name));
  size_t size = H5Tget_size(ftype);
  Handle mtype = type_h(H5Tcopy(H5T_C_S1), "copy string type");
  check(H5Tset_size(mtype, size), "set string size");
  check(H5Tset_strpad(mtype, H5T_STR_NULLPAD), "set string padding");
  std::string s(size, '\0');
  check(H5Aread(a, mtype, s.data()), name);
  s.resize(strnlen(s.data(), s.size()));
  return s;
}

// --- datasets ---------------------------------------------------------------------------

// Chunk dims: fill from the last dimension backwards up to kChunkElems, never beyond a dim.
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims) {
  std::vector<hsize_t> chunk(dims.size(), 1);
  hsize_t remaining = kChunkElems;
  for (size_t i = dims.size(); i-- > 0;) {
    chunk[i] = std::max<hsize_t>(1, std::min(dims[i], remaining));
    remaining = std::max<hsize_t>(1, remaining / chunk[i]);
  }
  return chunk;
}

// Writes `data` (row-major, numel(dims) elements) as a checksummed dataset with that shape.
void write_dataset(hid_t parent, const std::string& name, hid_t mem_type, hid_t file_type,
                   const std::vector<hsize_t>& dims, const void* data, size_t elem_size) {
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  Handle space = space_h(dims.empty() ? H5Screate(H5S_SCALAR)
                                      : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                         "create dataspace");
  Handle dcpl = plist_h(H5Pcreate(H5P_DATASET_CREATE), "create dataset properties");
  // A chunk needs at least one element in every dimension; empty and scalar datasets carry
  // no data to checksum and stay contiguous.
  std::vector<hsize_t> chunk;
  if (n > 0 && !dims.empty()) {
    chunk = chunk_dims(dims);
    check(H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()), "set chunking");
    check(H5Pset_fletcher32(dcpl), "set fletcher32 filter");
  }
  Handle ds =
      dset_h(H5Dcreate2(parent, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
             name.c_str());
  if (n == 0) return;
  if (dims.empty()) {
    check(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name.c_str());
    return;
  }
  // Slabs of whole rows of chunks along dim 0; usually one slab, i.e. one H5Dwrite.
  hsize_t row = n / dims[0];
  hsize_t chunk_rows = chunk[0];
  hsize_t rows_per_slab = chunk_rows * std::max<hsize_t>(1, kSlabElems / (chunk_rows * row));
  for (hsize_t r0 = 0; r0 < dims[0]; r0 += rows_per_slab) {
    hsize_t rows = std::min(rows_per_slab, dims[0] - r0);
    if (rows == dims[0]) {
      check(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name.c_str());
      break;
    }
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = r0;
    count[0] = rows;
    check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
          "select slab");
    hsize_t mem_n = rows * row;
    Handle mem = space_h(H5Screate_simple(1, &mem_n, nullptr), "create memory space");
    const char* p = static_cast<const char*>(data) + r0 * row * elem_size;
    check(H5Dwrite(ds, mem_type, mem, space, H5P_DEFAULT, p), name.c_str());
  }
}

void write_floats(hid_t parent, const ParamEntry& p, const float* flat) {
  std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
  write_dataset(parent, p.name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, dims, flat + p.offset,
                sizeof(float));
  Handle ds = dset_h(H5Dopen2(parent, p.name.c_str(), H5P_DEFAULT), p.name.c_str());
  put_attr<int64_t>(ds, "offset", H5T_NATIVE_INT64, p.offset);
}

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// --- metadata ---------------------------------------------------------------------------

Header header_of(const CheckpointData& d) {
  Header h;
  h.state = d.state;
  h.state.config_yaml.clear();
  h.format_version = kCheckpointFormatVersion;
  h.trainrun_version = TRAINRUN_VERSION;
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

// A 1-D character dataset: checksummed, unlike an attribute.
void write_text(hid_t f, const char* name, const std::string& text) {
  Handle chr = type_h(H5Tcopy(H5T_C_S1), "copy char type");
  check(H5Tset_size(chr, 1), "set char size");
  write_dataset(f, name, chr, chr, {hsize_t(text.size())}, text.data(), 1);
}

// The file access properties of every checkpoint write, on `fapl`.
void set_write_access(hid_t fapl) {
  // Strong close: H5Fclose really closes (and reports write errors) even if an id leaked.
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
  // The 1.10 file format checksums HDF5's own metadata (superblock, object headers with the
  // attributes and links in them, chunk indices): a flipped bit anywhere but in unused space
  // fails the open or the read.
  check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST), "set format bounds");
}

// HDF5's core driver hands its buffer to these callbacks; at close, after the superblock was
// written as for a closed file, the buffer is copied out. (H5Fget_file_image on an open 1.10
// file gives a superblock whose checksum no longer matches its status flags.)
struct ImageCapture {
  size_t size = 0;  // of the buffer last allocated
  std::vector<char> image;

  static H5FD_file_image_callbacks_t callbacks(ImageCapture* self) {
    H5FD_file_image_callbacks_t cb{};
    cb.image_malloc = [](size_t n, H5FD_file_image_op_t, void* u) {
      static_cast<ImageCapture*>(u)->size = n;
      return std::malloc(n);
    };
    cb.image_memcpy = [](void* d, const void* s, size_t n, H5FD_file_image_op_t, void*) {
      return std::memcpy(d, s, n);
    };
    cb.image_realloc = [](void* p, size_t n, H5FD_file_image_op_t, void* u) {
      static_cast<ImageCapture*>(u)->size = n;
      return std::realloc(p, n);
    };
    cb.image_free = [](void* p, H5FD_file_image_op_t op, void* u) -> herr_t {
      auto* self = static_cast<ImageCapture*>(u);
      if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && p)
        self->image.assign(static_cast<char*>(p), static_cast<char*>(p) + self->size);
      std::free(p);
      return 0;
    };
    cb.udata_copy = [](void* u) { return u; };
    cb.udata_free = [](void*) -> herr_t { return 0; };
    cb.udata = self;
    return cb;
  }
};

// An empty checkpoint file, built in memory (HDF5's core driver, no backing store), so that the
// file on disk can have its space reserved before HDF5 opens it (reserved_file.h). Trailing
// zeros past its end are harmless: HDF5 trims a file to its end when it closes it.
std::vector<char> empty_file_image() {
  ImageCapture capture;
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  set_write_access(fapl);
  check(H5Pset_fapl_core(fapl, 4096, false), "use the in-memory driver");
  H5FD_file_image_callbacks_t cb = ImageCapture::callbacks(&capture);
  check(H5Pset_file_image_callbacks(fapl, &cb), "set image callbacks");
  // Attributes stay in the root's object header (compact), under its checksum, rather than in
  // a separate heap.
  Handle fcpl = plist_h(H5Pcreate(H5P_FILE_CREATE), "create file creation properties");
  check(H5Pset_attr_phase_change(fcpl, 64, 32), "keep attributes compact");
  Handle f = file_h(H5Fcreate("checkpoint image", H5F_ACC_TRUNC, fcpl, fapl), "create image");
  f.close("close image");
  if (capture.image.empty()) throw H5Failure("HDF5 kept the in-memory image");
  return std::move(capture.image);
}

// Bytes a dataset of shape `dims` takes on disk beyond its header: whole chunks (edge chunks
// are stored full size) with fletcher32's 4 bytes each.
uint64_t stored_bytes(const std::vector<hsize_t>& dims, size_t elem_size) {
  if (dims.empty()) return elem_size;
  std::vector<hsize_t> chunk = chunk_dims(dims);
  uint64_t chunks = 1, per_chunk = elem_size;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) return 0;
    chunks *= (dims[i] + chunk[i] - 1) / chunk[i];
    per_chunk *= chunk[i];
  }
  return chunks * (per_chunk + 4);
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

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw H5Failure(fmt::format("cannot open {} to sync it: {}", path, strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw H5Failure(fmt::format("fsync {} failed: {}", path, strerror(err)));
}

// --- reading ----------------------------------------------------------------------------

std::vector<int64_t> dataset_shape(hid_t ds) {
  Handle space = space_h(H5Dget_space(ds), "get dataspace");
  int rank = check(H5Sget_simple_extent_ndims(space), "get rank");
  std::vector<hsize_t> dims(size_t(rank), 0);
  check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "get dims");
  return {dims.begin(), dims.end()};
}

std::string read_text(hid_t f, const char* name) {
  if (check(H5Lexists(f, name, H5P_DEFAULT), name) <= 0)
    throw H5Failure(fmt::format("/{} is missing", name));
  Handle ds = dset_h(H5Dopen2(f, name, H5P_DEFAULT), name);
  std::vector<int64_t> shape = dataset_shape(ds);
  if (shape.size() != 1) throw H5Failure(fmt::format("/{} is not a 1-D character dataset", name));
  std::string text(size_t(shape[0]), '\0');
  Handle chr = type_h(H5Tcopy(H5T_C_S1), "copy char type");
  check(H5Tset_size(chr, 1), "set char size");
  if (!text.empty())
    check(H5Dread(ds, chr, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()),
          fmt::format("read /{}", name).c_str());
  return text;
}

// The parameter table of one group of per-parameter datasets, from their headers alone: the
// entries sorted by offset, checked to lie inside the flat buffer without overlap.
std::vector<ParamEntry> read_table(hid_t f, const char* path, const Header& h) {
  Handle g = group_h(H5Gopen2(f, path, H5P_DEFAULT), path);
  std::vector<ParamEntry> params;
  for (std::string& name : member_names(g)) {
    Handle ds = dset_h(H5Dopen2(g, name.c_str(), H5P_DEFAULT), name.c_str());
    ParamEntry p;
    p.shape = dataset_shape(ds);
    p.offset = get_attr<int64_t>(ds, "offset", H5T_NATIVE_INT64);
    p.name = std::move(name);
    for (int64_t dim : p.shape)
      if (dim < 0) throw H5Failure(fmt::format("{}/{} has a negative dimension", path, p.name));
    if (p.offset < 0 || p.offset + numel(p.shape) > h.flat_size)
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
  Handle g = group_h(H5Gopen2(f, path, H5P_DEFAULT), path);
  for (const ParamEntry& p : params) {
    const size_t n = size_t(numel(p.shape));
    if (n == 0) continue;
    Handle ds = dset_h(H5Dopen2(g, p.name.c_str(), H5P_DEFAULT), p.name.c_str());
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

struct Loaded {
  CheckpointData data;
  std::string note;  // check_metadata's caveat
};

// The one verification behind read_checkpoint and verify_checkpoint (and so inspect, resume,
// rollback and the supervisor). Reads (keep == true) or only verifies the whole file: checksums
// of the metadata first, then whether its values make sense, then every tensor's checksum and
// finiteness. Throws H5Failure for damage, Unusable for an intact file that must not be used.
Loaded load(const std::string& path, bool keep) {
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
  Handle f = file_h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "open");
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

  std::vector<float> scratch;
  auto into = [&](std::vector<float>& flat) -> Sink {
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

// load() with its failures turned into a verdict; the data into `data` when given.
Verdict judge(const std::string& path, CheckpointData* data) {
  Verdict v;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    v.reason = "file does not exist";
    return v;
  }
  try {
    Loaded l = load(path, data != nullptr);
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

// Everything the headers tell, which may survive damage to the data.
std::string describe_headers(const std::string& path) {
  Handle f = file_h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open");
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
    Handle g = group_h(H5Gopen2(f, group, H5P_DEFAULT), group);
    for (const std::string& name : member_names(g)) {
      Handle ds = dset_h(H5Dopen2(g, name.c_str(), H5P_DEFAULT), name.c_str());
      std::vector<int64_t> shape = dataset_shape(ds);
      if (group[0] == 'm') total += numel(shape);
      lines.push_back(fmt::format("  /{}/{} {}", group, name, shape_str(shape)));
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

void write_checked_checkpoint(const std::string& path, const CheckpointData& data) {
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
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw H5Failure(fmt::format("rename to {} failed: {}", path, strerror(errno)));
    fs::path dir = fs::path(path).parent_path();
    fsync_path(dir.empty() ? "." : dir.string(), true);
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    throw CheckpointWriteError(fmt::format("cannot write checkpoint {}: {}", path, e.what()));
  }
}

void write_checkpoint(const std::string& path, const CheckpointData& data) {
  if (std::string why = non_finite_reason(data); !why.empty())
    throw NonFiniteCheckpoint(fmt::format("not writing checkpoint {}: {}", path, why));
  write_checked_checkpoint(path, data);
}

CheckpointData read_checkpoint(const std::string& path) {
  quiet();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw CheckpointError(fmt::format("checkpoint {} does not exist", path));
  CheckpointData d;
  Verdict v = judge(path, &d);
  if (!v.ok)
    throw CheckpointError(fmt::format("checkpoint {} is {}: {}", path, v.problem(), v.reason));
  if (!v.note.empty()) spdlog::warn("checkpoint {}: {}", path, v.note);
  return d;
}

Verdict verify_checkpoint(const std::string& path) {
  quiet();
  return judge(path, nullptr);
}

std::string describe_checkpoint(const std::string& path) {
  quiet();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw CheckpointError(fmt::format("checkpoint {} does not exist", path));
  std::string out = fmt::format("checkpoint: {}\n", path);
  auto size = fs::file_size(path, ec);
  if (!ec) out += fmt::format("size: {:.1f} MiB ({} bytes)\n", double(size) / (1 << 20), size);
  try {
    out += describe_headers(path);
  } catch (const H5Failure& e) {
    out += fmt::format("metadata unreadable: {}\n", e.what());
  }
  // The verdict reads every byte, with the very checks resume and rollback make.
  Verdict v = verify_checkpoint(path);
  if (v.ok)
    out += v.note.empty() ? "verdict: OK\n" : fmt::format("verdict: OK ({})\n", v.note);
  else
    out += fmt::format("verdict: {} ({}){}\n", v.unusable ? "UNUSABLE" : "DAMAGED", v.reason,
                       v.unusable ? ": resume and rollback skip this file" : "");
  return out;
}

}  // namespace trainrun
