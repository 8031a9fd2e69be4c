// Internal to src/checkpoint: the HDF5 building blocks that both checkpoint layouts (one file;
// one file per rank plus a manifest) are made of: attributes, chunked fletcher32 datasets,
// character datasets, the empty file image that reserved_file.h needs, and durable renames.
// Every function throws h5::H5Failure; callers add the file's name. Thread safe as HDF5 is.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainrun/checkpoint/h5_handle.h"

namespace trainrun::ckpt_io {

using namespace h5;

// An intact file whose content must not be used: a non-finite value, an absurd attribute.
// (Damage, i.e. a checksum or structure failure, is an H5Failure.)
struct Unusable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Opens an existing checkpoint file read-only. Only a regular file: a FIFO (or a device) in a
// checkpoint's place would block the open for ever, so it is refused first (H5Failure).
Handle open_readonly(const std::string& path, hid_t fapl);
// Throws H5Failure unless `path` is a regular file (or does not exist: the open then says so).
void require_regular_file(const std::string& path);

// The element count of `shape`; throws H5Failure for a negative dimension or a count beyond
// 2^62 (a shape read from a file is bounded by its stored bytes only after storage checks).
int64_t numel(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);  // "[2, 3]"
std::string iso_now();                                     // UTC, "2026-12-01T07:25:42Z"

template <typename T>
void put_attr(hid_t obj, const char* name, hid_t type, T value) {
  Handle space = space_h(H5Screate(H5S_SCALAR), "create attribute space");
  Handle a = attr_h(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), name);
  check(H5Awrite(a, type, &value), name);
}

void put_attr_str(hid_t obj, const char* name, const std::string& value);

template <typename T>
T get_attr(hid_t obj, const char* name, hid_t type) {
  if (check(H5Aexists(obj, name), name) == 0)
    throw H5Failure(fmt::format("attribute '{}' is missing", name));
  Handle a = attr_h(H5Aopen(obj, name, H5P_DEFAULT), name);
  T value{};
  check(H5Aread(a, type, &value), name);
  return value;
}

std::string get_attr_str(hid_t obj, const char* name);

// How trainrun stores a data set. Reading anything else is refused (H5Failure), before a byte of
// data is read: a data set without its checksum (unverified), external storage, a virtual data
// set or a link to another file would hand the reader bytes no checksum covers, or from a FIFO
// that never answers.
enum class Storage {
  checksummed,   // chunked with fletcher32 and no other filter, every chunk stored; or compact
                 // (in the object header, under its checksum); or empty
  plain_floats,  // n float32 stored contiguously in the file itself (the caller checks a CRC)
};
// Opens the data set `name` of `parent` after checking that it is a hard link (not a soft or
// external link), then checks its storage.
Handle open_dataset(hid_t parent, const std::string& name, Storage storage);
// Opens a group by a path of hard links only ("optimizer/m": both components).
Handle open_group(hid_t parent, const std::string& path);
// "" when `ds` is stored as `storage` says; else why not, for a message.
std::string storage_problem(hid_t ds, Storage storage);

// Writes `data` (row-major, numel(dims) elements) as a checksummed dataset with that shape.
void write_dataset(hid_t parent, const std::string& name, hid_t mem_type, hid_t file_type,
                   const std::vector<hsize_t>& dims, const void* data, size_t elem_size);
// A 1-D float32 dataset of n elements stored contiguously, without a filter: for data the caller
// checksums itself (a sharded checkpoint's CRC-32C), so HDF5 copies nothing and the disk sets
// the pace. Moved in slabs of 256K elements; `each` sees every slab while it is in cache (before
// it is written; after it is read). Reading with out == nullptr only passes each slab to `each`
// (verification without holding the data).
using SlabFn = std::function<void(const float* slab, size_t n)>;
void write_floats_contiguous(hid_t parent, const char* name, const float* data, size_t n,
                             const SlabFn& each);
// Reads several such data sets of one file (in file order, for one read pipeline).
struct FloatsRead {
  const char* name;
  float* out;  // n elements, or nullptr: only verify
  size_t n;
  SlabFn each;
  size_t begin = 0;      // the first element read: elements [begin, begin + n) of the data set,
  size_t dataset_n = 0;  // which holds dataset_n elements (0: n, the whole data set)
};
void read_floats_contiguous(hid_t parent, const std::vector<FloatsRead>& reads);

// Text, checksummed unlike an attribute: a scalar fixed-length string in compact layout (in the
// object header, which HDF5 1.10 checksums) up to kCompactTextBytes, a 1-D character dataset
// with fletcher32 beyond. read_text reads either, so files of formats 1-2 (always 1-D) too.
inline constexpr size_t kCompactTextBytes = 60000;  // compact data must fit in 64 KiB
void write_text(hid_t f, const char* name, const std::string& text);
std::string read_text(hid_t f, const char* name);
std::vector<int64_t> dataset_shape(hid_t ds);

// Allocations of at least kAlignThreshold bytes (data, not headers) start at a multiple of
// kAlignment: set_write_access says why.
inline constexpr hsize_t kAlignThreshold = 64 * 1024, kAlignment = 4096;

// Bytes a dataset of shape `dims` takes on disk beyond its header, alignment padding included.
uint64_t stored_bytes(const std::vector<hsize_t>& dims, size_t elem_size);

// The file access properties of every checkpoint write, on `fapl`.
void set_write_access(hid_t fapl);
// An empty checkpoint file built in memory, for create_reserved_file.
const std::vector<char>& empty_file_image();  // built once per process

}  // namespace trainrun::ckpt_io
