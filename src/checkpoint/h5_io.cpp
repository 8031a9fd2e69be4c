// The HDF5 building blocks of checkpoint files (h5_io.h).
#include "h5_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "direct_write.h"
#include "slab_reader.h"

namespace trainrun::ckpt_io {

// Chunks of up to 1M elements (4 MiB): large enough that the filter pipeline runs at disk
// speed, small enough that one damaged chunk does not hide much, and a chunk bypasses
// HDF5's 1 MiB chunk cache, so writes go straight to the file.
constexpr hsize_t kChunkElems = hsize_t{1} << 20;
// Each H5Dwrite covers at most this many elements (16 MiB). The thread-safe HDF5 holds one
// global lock per call; bounded writes let the training thread's metric appends interleave
// with a background checkpoint instead of waiting for a whole embedding table.
constexpr hsize_t kSlabElems = hsize_t{4} << 20;

void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw H5Failure(
        "not a regular file (a FIFO, device or socket in a checkpoint's place): "
        "remove it or point at the real checkpoint");
}

Handle open_readonly(const std::string& path, hid_t fapl) {
  require_regular_file(path);
  return file_h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "open");
}

int64_t numel(const std::vector<int64_t>& shape) {
  for (int64_t d : shape)
    if (d < 0) throw H5Failure(fmt::format("shape {} has a negative dimension", shape_str(shape)));
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  constexpr int64_t kMax = int64_t{1} << 62;  // leaves room for offset + numel sums
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n) || n > kMax)
      throw H5Failure(fmt::format("shape {} holds more than 2^62 elements", shape_str(shape)));
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// --- attributes -------------------------------------------------------------------------

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

// --- what a reader accepts ---------------------------------------------------------------

namespace {

// "/model/wte.weight": the object's path in its file, for messages.
std::string path_of(hid_t obj) {
  const ssize_t len = H5Iget_name(obj, nullptr, 0);
  if (len <= 0) return "?";
  std::string name(static_cast<size_t>(len) + 1, '\0');
  H5Iget_name(obj, name.data(), name.size());
  name.resize(static_cast<size_t>(len));
  return name;
}

// A soft or external link is followed by the open itself: an external one opens another file
// (a FIFO there blocks the open for ever), so the link is judged before anything is opened.
void require_hard_link(hid_t parent, const std::string& name) {
  const std::string shown =
      fmt::format("{}/{}", path_of(parent) == "/" ? "" : path_of(parent), name);
  if (check(H5Lexists(parent, name.c_str(), H5P_DEFAULT), shown.c_str()) <= 0)
    throw H5Failure(fmt::format("{} is missing", shown));
  H5L_info_t info{};
  check(H5Lget_info(parent, name.c_str(), &info, H5P_DEFAULT), shown.c_str());
  if (info.type != H5L_TYPE_HARD)
    throw H5Failure(fmt::format(
        "{} is {} link (to another place{}): trainrun writes none, and a checkpoint's data must "
        "lie in the checkpoint itself",
        shown, info.type == H5L_TYPE_SOFT ? "a soft" : "an external",
        info.type == H5L_TYPE_SOFT ? "" : " or file"));
}

constexpr const char* kUnverified =
    "unverified: its data is stored without a checksum (trainrun writes every data set with "
    "fletcher32), as after `h5repack -f NONE`; nothing can tell whether its bytes are the ones "
    "written";

}  // namespace

std::string storage_problem(hid_t ds, Storage storage) {
  Handle dcpl = plist_h(H5Dget_create_plist(ds), "get creation properties");
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_VIRTUAL)
    return "a virtual data set (its data lies in other data sets or files); trainrun writes none";
  if (check(H5Pget_external_count(dcpl), "get external files") != 0)
    return "stored in an external file (HDF5 external storage); trainrun writes none, and a "
           "checkpoint's data must lie in the checkpoint itself";
  const int filters = check(H5Pget_nfilters(dcpl), "get filters");
  const std::vector<int64_t> shape = dataset_shape(ds);
  Handle type = type_h(H5Dget_type(ds), "get type");
  const uint64_t elem = H5Tget_size(type);
  const int64_t n = numel(shape);
  const uint64_t stored = H5Dget_storage_size(ds);
  if (storage == Storage::plain_floats) {
    if (H5Tequal(type, H5T_IEEE_F32LE) <= 0 || layout != H5D_CONTIGUOUS || filters != 0)
      return "not float32 stored contiguously without filters, as trainrun writes a shard";
    if (stored != static_cast<uint64_t>(n) * sizeof(float))
      return fmt::format("{} bytes stored for {} float32 values", stored, n);
    return "";
  }
  if (layout == H5D_COMPACT) return "";  // in the object header, under its checksum
  if (layout == H5D_CONTIGUOUS) return n == 0 && !shape.empty() ? "" : kUnverified;
  if (layout != H5D_CHUNKED) return "stored in a layout trainrun does not write";
  bool fletcher32 = false, other = false;
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    size_t values = 0;
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl, unsigned(i), &flags, &values, nullptr, 0, nullptr, nullptr);
    (id == H5Z_FILTER_FLETCHER32 ? fletcher32 : other) = true;
  }
  if (!fletcher32) return kUnverified;
  if (other) return "filtered with more than fletcher32; trainrun writes no other filter";
  // Every chunk present, each its full size and fletcher32's 4 bytes: a chunk never written
  // reads as zeros that no checksum covers, and a dataspace of 2^61 elements with none stored
  // would be allocated in full by a reader.
  std::vector<hsize_t> chunk(shape.size(), 1);
  check(H5Pget_chunk(dcpl, int(chunk.size()), chunk.data()), "get chunk dims");
  unsigned __int128 chunks = 1, per_chunk = elem;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (chunk[i] == 0) return "a chunk dimension is 0";
    chunks *= (static_cast<uint64_t>(shape[i]) + chunk[i] - 1) / chunk[i];
    per_chunk *= chunk[i];
  }
  if (n > 0 && static_cast<unsigned __int128>(stored) != chunks * (per_chunk + 4))
    return fmt::format(
        "{} bytes of chunks stored for shape {}, {} expected: chunks are missing (they would "
        "read as zeros no checksum covers)",
        stored, shape_str(shape),
        static_cast<uint64_t>(std::min<unsigned __int128>(chunks * (per_chunk + 4), UINT64_MAX)));
  return "";
}

Handle open_dataset(hid_t parent, const std::string& name, Storage storage) {
  require_hard_link(parent, name);
  Handle ds = dset_h(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), name.c_str());
  if (std::string why = storage_problem(ds, storage); !why.empty())
    throw H5Failure(fmt::format("{} is {}", path_of(ds), why));
  return ds;
}

Handle open_group(hid_t parent, const std::string& path) {
  Handle g;
  hid_t at = parent;
  for (size_t b = 0; b <= path.size();) {
    const size_t e = std::min(path.find('/', b), path.size());
    const std::string part = path.substr(b, e - b);
    require_hard_link(at, part);
    g = group_h(H5Gopen2(at, part.c_str(), H5P_DEFAULT), part.c_str());
    at = g;
    b = e + 1;
  }
  return g;
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

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A 1-D character dataset: checksummed, unlike an attribute.
void write_text(hid_t f, const char* name, const std::string& text) {
  if (text.size() > kCompactTextBytes) {
    // Too large for the object header: a 1-D character array, fletcher32 on its chunks.
    Handle chr = type_h(H5Tcopy(H5T_C_S1), "copy char type");
    check(H5Tset_size(chr, 1), "set char size");
    write_dataset(f, name, chr, chr, {hsize_t(text.size())}, text.data(), 1);
    return;
  }
  // One fixed-length UTF-8 string (h5py reads b'...', h5dump prints the text), stored compact:
  // the bytes live in the dataset's object header, which the 1.10 format checksums.
  Handle str = type_h(H5Tcopy(H5T_C_S1), "copy string type");
  check(H5Tset_size(str, std::max<size_t>(text.size(), 1)), "set string size");
  check(H5Tset_strpad(str, H5T_STR_NULLPAD), "set string padding");
  check(H5Tset_cset(str, H5T_CSET_UTF8), "set string charset");
  Handle space = space_h(H5Screate(H5S_SCALAR), "create scalar dataspace");
  Handle dcpl = plist_h(H5Pcreate(H5P_DATASET_CREATE), "create dataset properties");
  check(H5Pset_layout(dcpl, H5D_COMPACT), "set compact layout");
  Handle ds = dset_h(H5Dcreate2(f, name, str, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), name);
  std::string padded = text;
  padded.resize(std::max<size_t>(text.size(), 1), '\0');
  check(H5Dwrite(ds, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()), name);
}

// The file access properties of every checkpoint write, on `fapl`.
void set_write_access(hid_t fapl) {
  // Strong close: H5Fclose really closes (and reports write errors) even if an id leaked.
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
  // The 1.10 file format checksums HDF5's own metadata (superblock, object headers with the
  // attributes and links in them, chunk indices): a flipped bit anywhere but in unused space
  // fails the open or the read.
  check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST), "set format bounds");
  // Data (chunks, contiguous data sets) starts on a page boundary, so that no two writes share
  // a page: a page shared with a write still under writeback has to wait for it. Costs at most
  // 4 KiB per chunk.
  check(H5Pset_alignment(fapl, kAlignThreshold, kAlignment), "set alignment");
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

namespace {

std::vector<char> build_empty_file_image() {
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

}  // namespace

// An empty checkpoint file, built in memory (HDF5's core driver, no backing store), so that the
// file on disk can have its space reserved before HDF5 opens it (reserved_file.h). Trailing
// zeros past its end are harmless: HDF5 trims a file to its end when it closes it. Built once
// per process: the core driver knows an in-memory file by its name, so two threads building it
// at once (a sync save beside an async writer) would find "checkpoint image" already open.
const std::vector<char>& empty_file_image() {
  static const std::vector<char> image = build_empty_file_image();
  return image;
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
  return chunks * (per_chunk + 4 + (per_chunk + 4 >= kAlignThreshold ? kAlignment : 0));
}

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
  Handle ds = open_dataset(f, name, Storage::checksummed);
  std::vector<int64_t> shape = dataset_shape(ds);
  Handle file_type = type_h(H5Dget_type(ds), name);
  if (shape.empty() && H5Tget_class(file_type) == H5T_STRING && !H5Tis_variable_str(file_type)) {
    // A scalar fixed-length string (format 3 on), NUL-padded.
    std::string text(H5Tget_size(file_type), '\0');
    // Read as stored (the same size, padding and character set: HDF5 does not convert
    // between character sets), then cut at the padding.
    check(H5Dread(ds, file_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()),
          fmt::format("read /{}", name).c_str());
    text.resize(std::min(text.size(), std::strlen(text.c_str())));
    return text;
  }
  if (shape.size() != 1)
    throw H5Failure(fmt::format("/{} is neither a string nor a 1-D character dataset", name));
  if (H5Tget_class(file_type) != H5T_STRING || H5Tget_size(file_type) != 1)
    throw H5Failure(fmt::format("/{} is not an array of 1-byte characters", name));
  // Each character read as stored: converting a NUL-padded 1-byte string (h5py's 'S1') to C's
  // NUL-terminated one would leave no room for the character.
  std::string text(size_t(shape[0]), '\0');
  if (!text.empty())
    check(H5Dread(ds, file_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()),
          fmt::format("read /{}", name).c_str());
  return text;
}

namespace {

// A slab of 256K floats (1 MiB) stays in L2 between the copy and the checks that follow it.
constexpr size_t kContiguousSlab = size_t{1} << 18;
// Reads go 4 MiB at a time: fewer calls and wake-ups between the reader and the checker.
constexpr size_t kReadSlabBytes = size_t{4} << 20;
// A direct write waits for the disk, so each request is large enough to keep it busy.
constexpr size_t kDirectSlabBytes = size_t{16} << 20;

// The name the file holding `ds` was opened by.
std::string file_name_of(hid_t ds) {
  const ssize_t len = H5Fget_name(ds, nullptr, 0);
  if (len <= 0) return {};
  std::string name(static_cast<size_t>(len) + 1, '\0');
  H5Fget_name(ds, name.data(), name.size());
  name.resize(static_cast<size_t>(len));
  return name;
}

// Calls fn(file_space, mem_space, offset, count) for each slab of elements [from, n) of a 1-D
// dataset of n elements.
template <typename Fn>
void for_each_slab(hid_t ds, size_t from, size_t n, Fn fn) {
  Handle space = space_h(H5Dget_space(ds), "get dataspace");
  for (size_t at = from; at < n; at += kContiguousSlab) {
    const hsize_t start = at, count = std::min(kContiguousSlab, n - at);
    check(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr),
          "select slab");
    Handle mem = space_h(H5Screate_simple(1, &count, nullptr), "create memory space");
    fn(hid_t(space), hid_t(mem), at, size_t(count));
  }
}

}  // namespace

void write_floats_contiguous(hid_t parent, const char* name, const float* data, size_t n,
                             const SlabFn& each) {
  const hsize_t dims = n;
  Handle space = space_h(H5Screate_simple(1, &dims, nullptr), "create dataspace");
  Handle dcpl = plist_h(H5Pcreate(H5P_DATASET_CREATE), "create dataset properties");
  // Space allocated at creation: the writes below fill reserved blocks (reserved_file.h).
  check(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), "set allocation time");
  check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "set fill time");
  Handle ds =
      dset_h(H5Dcreate2(parent, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), name);
  // The bulk past the page cache (direct_write.h says why), where the file system allows; HDF5
  // allocated the extent above and gives its offset. The rest (a tail of less than 4 KiB, or all
  // of it) goes through HDF5.
  size_t done = 0;
  const haddr_t base = H5Dget_offset(ds);
  H5Eclear2(H5E_DEFAULT);
  if (n > 0 && base != HADDR_UNDEF) {
    try {
      done = write_direct_prefix(file_name_of(ds), static_cast<off_t>(base),
                                 reinterpret_cast<const char*>(data), n * sizeof(float),
                                 kDirectSlabBytes,
                                 [&](const char* p, size_t bytes) {
                                   if (each)
                                     each(reinterpret_cast<const float*>(p), bytes / sizeof(float));
                                 }) /
             sizeof(float);
    } catch (const DirectWriteError& e) {
      throw H5Failure(fmt::format("write /{}: {}", name, e.what()));
    }
  }
  for_each_slab(ds, done, n, [&](hid_t file_space, hid_t mem, size_t at, size_t count) {
    if (each) each(data + at, count);
    check(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, data + at), name);
  });
}

namespace {

// The file descriptor under a dataset opened with HDF5's default (sec2) driver; -1 otherwise.
int posix_fd_of(hid_t ds) {
  const hid_t file = H5Iget_file_id(ds);
  if (file < 0) return -1;
  int fd = -1;
  void* handle = nullptr;
  const hid_t fapl = H5Fget_access_plist(file);
  if (fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2 &&
      H5Fget_vfd_handle(file, fapl, &handle) >= 0 && handle)
    fd = *static_cast<int*>(handle);
  if (fapl >= 0) H5Pclose(fapl);
  H5Fclose(file);  // the id only; the file stays open under `ds`
  H5Eclear2(H5E_DEFAULT);
  return fd;
}

}  // namespace

void read_floats_contiguous(hid_t parent, const std::vector<FloatsRead>& reads) {
  std::vector<Handle> sets;
  std::vector<SlabRange> ranges;
  bool all_plain = true;  // else every data set goes through HDF5
  int fd = -1;            // the file's (one file: every data set's is the same)
  for (const FloatsRead& r : reads) {
    Handle ds = open_dataset(parent, r.name, Storage::plain_floats);
    const size_t total = r.dataset_n ? r.dataset_n : r.n;
    if (dataset_shape(ds) != std::vector<int64_t>{static_cast<int64_t>(total)} || r.begin > total ||
        r.n > total - r.begin)
      throw H5Failure(fmt::format("/{} is not {} elements", r.name, total));
    // Plain bytes in a file we hold a descriptor of: read on a second thread while `each`
    // checks what has arrived (slab_reader.h says why). HDF5 still vouched for the offset and
    // the extent (its metadata is checksummed); the data's own checksum is the caller's.
    const haddr_t base = H5Dget_offset(ds);
    const int ds_fd = base == HADDR_UNDEF ? -1 : posix_fd_of(ds);
    H5Eclear2(H5E_DEFAULT);
    // open_dataset vouched for the layout (contiguous float32 in this file, no filter).
    if (r.n > 0 && ds_fd >= 0 && H5Tequal(H5T_NATIVE_FLOAT, H5T_IEEE_F32LE) > 0) {
      fd = ds_fd;
      ranges.push_back({static_cast<off_t>(base + r.begin * sizeof(float)), r.n * sizeof(float),
                        reinterpret_cast<char*>(r.out), [&r](const char* p, size_t bytes) {
                          if (r.each)
                            r.each(reinterpret_cast<const float*>(p), bytes / sizeof(float));
                        }});
    } else if (r.n > 0) {
      all_plain = false;
    }
    sets.push_back(std::move(ds));
  }
  if (all_plain) {  // one pipeline for the whole file: no restart between data sets
    try {
      read_slabs(fd, ranges, kReadSlabBytes);
    } catch (const SlabReadError& e) {
      std::vector<std::string> names;
      for (const FloatsRead& r : reads) names.push_back(fmt::format("/{}", r.name));
      throw H5Failure(fmt::format("read {}: {}", fmt::join(names, ", "), e.what()));
    }
    return;
  }
  for (size_t i = 0; i < reads.size(); ++i) {
    const FloatsRead& r = reads[i];
    std::vector<float> slab(r.out ? 0 : std::min(r.n, kContiguousSlab));  // only verifying
    for_each_slab(sets[i], r.begin, r.begin + r.n,
                  [&](hid_t file_space, hid_t mem, size_t at, size_t count) {
                    float* into = r.out ? r.out + (at - r.begin) : slab.data();
                    check(H5Dread(sets[i], H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, into),
                          fmt::format("read /{}", r.name).c_str());
                    if (r.each) r.each(into, count);
                  });
  }
}

}  // namespace trainrun::ckpt_io
