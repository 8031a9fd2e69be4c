// The checkpoint folder (checkpoint_folder.h): each rank writes its slices, rank 0 commits the
// manifest, and a reader on any layout reads the slices that overlap what it asks for.
#include "checkpoint_folder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "box_copy.h"
#include "checkpoint_file.h"
#include "checkpoint_metadata.h"
#include "h5_io.h"
#include "non_finite.h"
#include "reserved_file.h"
#include "trainrun/core/build_info.h"
#include "trainrun/core/crc32c.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"

namespace trainrun {
namespace {

using namespace ckpt_io;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kFormat = "trainrun checkpoint";
constexpr const char* kLegacyTitle = "trainrun sharded checkpoint";
constexpr const char* kCrcKey = "crc32c=";
constexpr size_t kManifestMaxBytes = size_t{256} << 20;  // a table of millions of slices
constexpr const char* kSlices = "slices";
constexpr const char* kIndex = "index";

// --- the tables both the index and the manifest hold ------------------------------------

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
};
struct SliceInfo {
  size_t tensor = 0;
  size_t file = 0;
  Box box;
  int64_t begin = 0;
  uint32_t crc = 0;
};
struct Table {
  std::vector<NamedValue> values;
  TrainState state;  // the summary of values, and the config
  std::vector<TensorInfo> tensors;
  std::vector<std::string> files;
  std::vector<int64_t> elements;  // per file
  std::vector<SliceInfo> slices;
  std::string trainrun_version, created;
};

json state_json(const std::vector<NamedValue>& values) {
  json out = json::object();
  for (const NamedValue& v : values) std::visit([&](auto x) { out[v.name] = x; }, v.value);
  return out;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.back() == '/') return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
          c == '/'))
      return false;
  return name.find("//") == std::string::npos;
}

std::vector<NamedValue> values_of_json(const json& j) {
  if (!j.is_object()) throw H5Failure("its state is not a JSON object");
  std::vector<NamedValue> out;
  for (const auto& [name, v] : j.items()) {
    if (!valid_name(name)) throw H5Failure(fmt::format("value name `{}` is not usable", name));
    if (v.is_number_unsigned())
      out.push_back({name, v.get<uint64_t>()});
    else if (v.is_number_integer())
      out.push_back({name, v.get<int64_t>()});
    else if (v.is_number_float())
      out.push_back({name, v.get<double>()});
    else
      throw H5Failure(fmt::format("value {} is {}, not a number", name, v.dump()));
  }
  return out;
}

// The summary of `values`; a missing or mistyped one is damage here.
TrainState summary_of(const std::vector<NamedValue>& values, const std::string& where) {
  try {
    return train_state_of(values, where);
  } catch (const CheckpointError& e) {
    throw H5Failure(e.what());
  }
}

std::string hex(uint32_t crc) {
  return fmt::format("{:08x}", crc);
}

uint32_t unhex(const std::string& s) {
  if (s.size() != 8 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw H5Failure(fmt::format("`{}` is not a CRC-32C", s));
  return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
}

json tensors_json(const std::vector<TensorInfo>& tensors) {
  json out = json::array();
  for (const TensorInfo& t : tensors)
    out.push_back({{"name", t.name}, {"dtype", "float32"}, {"shape", t.shape}});
  return out;
}

std::vector<TensorInfo> tensors_of(const json& j) {
  std::vector<TensorInfo> out;
  for (const json& t : j) {
    if (t.at("dtype").get<std::string>() != "float32")
      throw H5Failure(fmt::format("tensor {}: dtype {} is not float32", t.at("name").dump(),
                                  t.at("dtype").dump()));
    out.push_back({t.at("name").get<std::string>(), t.at("shape").get<std::vector<int64_t>>()});
  }
  return out;
}

json slice_json(const SliceInfo& s, bool with_file) {
  json out{{"tensor", s.tensor}};
  if (with_file) out["file"] = s.file;
  out["offsets"] = s.box.offsets;
  out["sizes"] = s.box.sizes;
  out["begin"] = s.begin;
  out["crc32c"] = hex(s.crc);
  return out;
}

SliceInfo slice_of(const json& j, size_t file) {
  SliceInfo s;
  s.tensor = j.at("tensor").get<size_t>();
  s.file = j.contains("file") ? j.at("file").get<size_t>() : file;
  s.box.offsets = j.at("offsets").get<std::vector<int64_t>>();
  s.box.sizes = j.at("sizes").get<std::vector<int64_t>>();
  s.begin = j.at("begin").get<int64_t>();
  s.crc = unhex(j.at("crc32c").get<std::string>());
  return s;
}

// Every check a table must pass, on commit and on every read: names, shapes, each slice inside
// its tensor and its file without overlapping another in that file, and every tensor covered by
// its slices exactly once. "" when it passes.
std::string table_problem(const Table& t) {
  std::set<std::string> names;
  for (const TensorInfo& x : t.tensors) {
    if (!valid_name(x.name)) return fmt::format("tensor name `{}` is not usable", x.name);
    if (!names.insert(x.name).second) return fmt::format("tensor {} is listed twice", x.name);
    try {
      numel(x.shape);
    } catch (const H5Failure& e) {
      return fmt::format("tensor {}: {}", x.name, e.what());
    }
  }
  std::vector<std::vector<const SliceInfo*>> by_tensor(t.tensors.size()), by_file(t.files.size());
  for (const SliceInfo& s : t.slices) {
    if (s.tensor >= t.tensors.size() || s.file >= t.files.size())
      return fmt::format("a slice names tensor {} of {} or file {} of {}", s.tensor,
                         t.tensors.size(), s.file, t.files.size());
    const TensorInfo& x = t.tensors[s.tensor];
    bool inside = s.box.offsets.size() == x.shape.size() && s.box.sizes.size() == x.shape.size();
    for (size_t d = 0; inside && d < x.shape.size(); ++d)
      inside = s.box.offsets[d] >= 0 && s.box.sizes[d] > 0 &&
               s.box.offsets[d] <= x.shape[d] - s.box.sizes[d];
    if (!inside)
      return fmt::format("slice {} of {} lies outside its shape {}", box_str(s.box), x.name,
                         shape_str(x.shape));
    const int64_t n = box_numel(s.box);
    if (s.begin < 0 || s.begin > t.elements[s.file] - n)
      return fmt::format("slice {} of {} (elements {} to {}) lies outside {}'s {} elements",
                         box_str(s.box), x.name, s.begin, s.begin + n, t.files[s.file],
                         t.elements[s.file]);
    by_tensor[s.tensor].push_back(&s);
    by_file[s.file].push_back(&s);
  }
  for (size_t f = 0; f < by_file.size(); ++f) {
    auto& v = by_file[f];
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i]->begin < v[i - 1]->begin + box_numel(v[i - 1]->box))
        return fmt::format("two slices overlap in {}", t.files[f]);
  }
  for (size_t i = 0; i < t.tensors.size(); ++i) {
    int64_t covered = 0;
    const auto& v = by_tensor[i];
    for (size_t a = 0; a < v.size(); ++a) {
      covered += box_numel(v[a]->box);
      for (size_t b = a + 1; b < v.size(); ++b)
        if (intersect(v[a]->box, v[b]->box))
          return fmt::format("tensor {}: slices {} and {} overlap", t.tensors[i].name,
                             box_str(v[a]->box), box_str(v[b]->box));
    }
    if (covered != numel(t.tensors[i].shape))
      return fmt::format("tensor {} {}: its slices hold {} of its {} elements", t.tensors[i].name,
                         shape_str(t.tensors[i].shape), covered, numel(t.tensors[i].shape));
  }
  return "";
}

Header header_of(const TrainState& s) {
  Header h;
  h.state = s;
  h.format_version = kFolderFormatVersion;
  return h;
}

// --- writing ----------------------------------------------------------------------------

void validate_for_write(const RankSnapshot& snap) {
  const TrainState state = snap.summary();
  const int world = state.world_size;
  if (world < 1 || snap.rank < 0 || snap.rank >= world)
    throw H5Failure(fmt::format("rank {} of world {} is not a rank", snap.rank, world));
  int64_t at = 0;
  for (const RankSnapshot::Slice& s : snap.slices) {
    if (s.tensor >= snap.tensors.size() || s.begin != at)
      throw H5Failure("the snapshot's slices are not packed in order");
    at += box_numel(s.box);
  }
  if (static_cast<size_t>(at) != snap.data.size())
    throw H5Failure(fmt::format("the slices hold {} elements, the data {}", at, snap.data.size()));
  if (std::string why = absurd_value(header_of(state)); !why.empty()) throw H5Failure(why);
}

std::string index_text(const RankSnapshot& snap, const std::vector<uint32_t>& crcs) {
  json j{{"format", kFormat},
         {"format_version", kFolderFormatVersion},
         {"trainrun_version", trainrun_version()},
         {"created", iso_now()},
         {"rank", snap.rank},
         {"world_size", snap.summary().world_size},
         {"elements", snap.data.size()},
         {"state", state_json(snap.values)}};
  if (snap.rank == 0) j["config"] = snap.config_yaml;
  std::vector<TensorInfo> tensors;
  for (const auto& t : snap.tensors) tensors.push_back({t.name, t.shape});
  j["tensors"] = tensors_json(tensors);
  json slices = json::array();
  for (size_t i = 0; i < snap.slices.size(); ++i) {
    const RankSnapshot::Slice& s = snap.slices[i];
    slices.push_back(
        slice_json({s.tensor, 0, s.box, s.begin, crcs.empty() ? 0 : crcs[i]}, /*with_file=*/false));
  }
  j["slices"] = std::move(slices);
  return j.dump();
}

void write_file(const std::string& file, const RankSnapshot& snap) {
  const size_t n = snap.data.size();
  // The index's size does not depend on the CRCs (eight hex digits each): bound it now.
  const size_t index_bytes = index_text(snap, {}).size();
  const uint64_t bound = 64 * 1024 + 4096 * 16 + n * sizeof(float) + kAlignment +
                         stored_bytes({hsize_t(index_bytes)}, 1);
  create_reserved_file(file, empty_file_image(), bound);
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  set_write_access(fapl);
  Handle f = file_h(H5Fopen(file.c_str(), H5F_ACC_RDWR, fapl), "open reserved file");
  put_attr<int64_t>(f, "format_version", H5T_NATIVE_INT64, kFolderFormatVersion);
  // One CRC per slice, taken slab by slab as each is written, while it is in cache: a reader
  // checks exactly the slices it reads.
  std::vector<uint32_t> crcs(snap.slices.size(), 0);
  size_t k = 0, pos = 0;
  write_floats_contiguous(f, kSlices, snap.data.data(), n, [&](const float* p, size_t count) {
    while (count > 0) {
      const RankSnapshot::Slice& s = snap.slices[k];
      const size_t end = static_cast<size_t>(s.begin + box_numel(s.box));
      const size_t take = std::min(count, end - pos);
      crcs[k] =
          crc32c(std::string_view(reinterpret_cast<const char*>(p), take * sizeof(float)), crcs[k]);
      p += take;
      count -= take;
      pos += take;
      if (pos == end) ++k;
    }
  });
  write_text(f, kIndex, index_text(snap, crcs));
  check(H5Fflush(f, H5F_SCOPE_GLOBAL), "flush file");
  f.close("close file");
}

Handle open_read(const std::string& path) {
  Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
  return open_readonly(path, fapl);
}

json parse(const std::string& text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw H5Failure(fmt::format("{} is not JSON: {}", what, e.what()));
  }
}

// --- the manifest ------------------------------------------------------------------------

std::string manifest_text(const Table& t) {
  json j{{"format", kFormat},
         {"format_version", kFolderFormatVersion},
         {"trainrun_version", t.trainrun_version},
         {"created", t.created},
         {"state", state_json(t.values)},
         {"config", t.state.config_yaml},
         {"tensors", tensors_json(t.tensors)}};
  json files = json::array();
  for (size_t f = 0; f < t.files.size(); ++f)
    files.push_back({{"name", t.files[f]}, {"elements", t.elements[f]}});
  j["files"] = std::move(files);
  json slices = json::array();
  for (const SliceInfo& s : t.slices) slices.push_back(slice_json(s, /*with_file=*/true));
  j["slices"] = std::move(slices);
  std::string out = j.dump(1) + "\n";
  return out + fmt::format("{}{}\n", kCrcKey, hex(crc32c(out)));
}

Table read_manifest(const std::string& dir) {
  const std::string text = read_manifest_text(dir);
  const size_t last = text.rfind(kCrcKey);
  if (last == std::string::npos || last == 0 || text[last - 1] != '\n' || !text.ends_with("\n"))
    throw H5Failure("MANIFEST has no checksum line (truncated?)");
  const std::string body = text.substr(0, last);
  if (hex(crc32c(body)) != text.substr(last + 7, text.size() - last - 8))
    throw H5Failure("MANIFEST fails its CRC-32C (damaged)");
  const json j = parse(body, "MANIFEST");
  Table t;
  try {
    if (!j.is_object() || j.value("format", "") != kFormat)
      throw H5Failure("MANIFEST is not a trainrun checkpoint manifest");
    if (const int v = j.at("format_version").get<int>(); v != kFolderFormatVersion)
      throw H5Failure(fmt::format(
          "MANIFEST: format_version {} is not supported (this trainrun reads {}); use the "
          "trainrun version that wrote it",
          v, kFolderFormatVersion));
    t.trainrun_version = j.at("trainrun_version").get<std::string>();
    t.created = j.at("created").get<std::string>();
    t.values = values_of_json(j.at("state"));
    t.state = summary_of(t.values, "MANIFEST");
    t.state.config_yaml = j.at("config").get<std::string>();
    t.tensors = tensors_of(j.at("tensors"));
    for (const json& f : j.at("files")) {
      t.files.push_back(f.at("name").get<std::string>());
      t.elements.push_back(f.at("elements").get<int64_t>());
    }
    for (const json& s : j.at("slices")) t.slices.push_back(slice_of(s, 0));
  } catch (const json::exception& e) {
    throw H5Failure(fmt::format("MANIFEST: {}", e.what()));
  }
  const int world = t.state.world_size;
  if (world < 1 || static_cast<int>(t.files.size()) != world)
    throw H5Failure(
        fmt::format("MANIFEST lists {} files for world_size {}", t.files.size(), world));
  for (int r = 0; r < world; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (t.files[i] != rank_file_name(r, world) || t.elements[i] < 0)
      throw H5Failure(fmt::format("MANIFEST: file {} is `{}` with {} elements, expected {}", r,
                                  t.files[i], t.elements[i], rank_file_name(r, world)));
  }
  if (std::string why = table_problem(t); !why.empty()) throw H5Failure("MANIFEST: " + why);
  return t;
}

// --- reading -----------------------------------------------------------------------------

// The MANIFEST is checksummed, but a checksum can be recomputed by whatever rewrote it (a tool, a
// bit flipped in memory before the write). Each rank file's /index, written by the rank itself
// and checksummed by HDF5, holds the train state, the tensor table and its slices too: the two
// must agree, as a single file's attributes must agree with its /metadata copy. Checked for each
// file before its data is read (a restoring rank opens only the files holding what it needs).
void check_index(const std::string& dir, const Table& t, size_t f) {
  const std::string path = (fs::path(dir) / t.files[f]).string();
  try {
    Handle file = open_read(path);
    const json j = parse(read_text(file, kIndex), "/index");
    file.close("close");
    const auto differs = [&](const char* what) {
      return H5Failure(fmt::format("its /index and MANIFEST differ in {} (one was changed)", what));
    };
    try {
      if (j.at("state") != state_json(t.values)) throw differs("the train state");
      if (f == 0 && j.at("config").get<std::string>() != t.state.config_yaml)
        throw differs("the config");
      if (j.at("tensors") != tensors_json(t.tensors)) throw differs("the tensor table");
      if (j.at("elements").get<int64_t>() != t.elements[f]) throw differs("its size");
      json mine = json::array();
      for (const SliceInfo& s : t.slices)
        if (s.file == f) mine.push_back(slice_json(s, /*with_file=*/false));
      if (j.at("slices") != mine) throw differs("its slices");
    } catch (const json::exception& e) {
      throw H5Failure(fmt::format("/index: {}", e.what()));
    }
  } catch (const H5Failure& e) {
    throw H5Failure(fmt::format("{}: {}", t.files[f], e.what()));
  }
}

class FolderSource final : public StateSource {
 public:
  FolderSource(std::string dir, Table table) : dir_(std::move(dir)), t_(std::move(table)) {
    by_tensor_.resize(t_.tensors.size());
    for (size_t i = 0; i < t_.slices.size(); ++i) by_tensor_[t_.slices[i].tensor].push_back(i);
    for (size_t i = 0; i < t_.tensors.size(); ++i) index_[t_.tensors[i].name] = i;
    index_checked_.assign(t_.files.size(), false);
  }

  bool shape_of(const std::string& tensor, std::vector<int64_t>* shape) const override {
    auto it = index_.find(tensor);
    if (it == index_.end()) return false;
    *shape = t_.tensors[it->second].shape;
    return true;
  }
  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> out;
    for (const TensorInfo& t : t_.tensors) out.push_back(t.name);
    return out;
  }
  const std::vector<NamedValue>& values() const override { return t_.values; }
  const std::string& path() const override { return dir_; }
  const Table& table() const { return t_; }

  void read(const std::vector<SliceRequest>& requests) override {
    // For every stored slice that overlaps a request: the requests it serves.
    std::map<size_t, std::vector<const SliceRequest*>> needed;
    for (const SliceRequest& q : requests) {
      auto it = index_.find(q.tensor);
      if (it == index_.end())
        throw CheckpointError(fmt::format("checkpoint {} holds no tensor {}", dir_, q.tensor));
      const std::vector<int64_t>& shape = t_.tensors[it->second].shape;
      if (q.box.offsets.size() != shape.size() || q.box.sizes.size() != shape.size() ||
          intersect(q.box, whole(shape)) != std::optional<Box>(q.box))
        throw std::invalid_argument(fmt::format("StateSource::read: box {} lies outside {} {}",
                                                box_str(q.box), q.tensor, shape_str(shape)));
      for (size_t s : by_tensor_[it->second])
        if (intersect(t_.slices[s].box, q.box)) needed[s].push_back(&q);
    }
    std::vector<std::vector<size_t>> by_file(t_.files.size());
    for (const auto& [s, qs] : needed) by_file[t_.slices[s].file].push_back(s);
    try {
      for (size_t f = 0; f < by_file.size(); ++f)
        if (!by_file[f].empty()) read_file(f, by_file[f], &needed);
    } catch (const Unusable& e) {
      throw CheckpointError(fmt::format("checkpoint {} is not usable: {}", dir_, e.what()));
    } catch (const H5Failure& e) {
      throw CheckpointError(fmt::format("checkpoint {} is damaged: {}", dir_, e.what()));
    }
  }

  // Every file's /index against the MANIFEST (damage is told before unusable values).
  void check_indexes() {
    for (size_t f = 0; f < t_.files.size(); ++f) check_index_once(f);
  }

  // Reads and checks every slice, keeping nothing.
  void verify_all() {
    for (size_t f = 0; f < t_.files.size(); ++f) {
      std::vector<size_t> all;
      for (size_t s = 0; s < t_.slices.size(); ++s)
        if (t_.slices[s].file == f) all.push_back(s);
      read_file(f, all, nullptr);
    }
  }

 private:
  void check_index_once(size_t f) {
    if (index_checked_[f]) return;
    check_index(dir_, t_, f);
    index_checked_[f] = true;
  }

  std::string where(const SliceInfo& s) const {
    return fmt::format("{} {}", t_.tensors[s.tensor].name, box_str(s.box));
  }

  // Reads the slices `which` of file f in one pipeline: each straight into the request it lies
  // in when it is one contiguous run of it, else into scratch and copied out; with `needed`
  // null, only checked.
  void read_file(size_t f, std::vector<size_t> which,
                 const std::map<size_t, std::vector<const SliceRequest*>>* needed) {
    std::sort(which.begin(), which.end(),
              [this](size_t a, size_t b) { return t_.slices[a].begin < t_.slices[b].begin; });
    const std::string name = t_.files[f];
    const std::string path = (fs::path(dir_) / name).string();
    check_index_once(f);
    try {
      require_regular_file(path);
      std::error_code ec;
      const uintmax_t bytes = fs::file_size(path, ec);
      if (ec) throw H5Failure(ec.message());
      // Bounds every buffer sized below by what the file really holds.
      if (static_cast<uint64_t>(t_.elements[f]) > bytes / sizeof(float))
        throw H5Failure(fmt::format("MANIFEST says it holds {} elements, it has {} bytes",
                                    t_.elements[f], bytes));
      Handle file = open_read(path);
      std::vector<uint32_t> crc(which.size(), 0);
      std::vector<size_t> seen(which.size(), 0);
      std::vector<std::vector<float>> scratch(which.size());
      std::vector<FloatsRead> reads;
      for (size_t i = 0; i < which.size(); ++i) {
        const SliceInfo& s = t_.slices[which[i]];
        const size_t n = static_cast<size_t>(box_numel(s.box));
        float* out = nullptr;
        if (needed) {
          const auto& qs = needed->at(which[i]);
          if (qs.size() == 1 && intersect(s.box, qs[0]->box) == s.box &&
              contiguous_within(s.box, qs[0]->box)) {
            out = qs[0]->out + offset_within(s.box, qs[0]->box);
          } else {
            scratch[i].resize(n);
            out = scratch[i].data();
          }
        }
        reads.push_back(
            {kSlices, out, n,
             [this, &s, &crc, &seen, i, n](const float* p, size_t k) {
               crc[i] = crc32c(
                   std::string_view(reinterpret_cast<const char*>(p), k * sizeof(float)), crc[i]);
               if (std::optional<NonFinite> nf = find_non_finite(p, k)) {
                 nf->first += seen[i];
                 throw Unusable(non_finite_message(where(s), *nf, n));
               }
               seen[i] += k;
             },
             static_cast<size_t>(s.begin), static_cast<size_t>(t_.elements[f])});
      }
      read_floats_contiguous(file, reads);
      for (size_t i = 0; i < which.size(); ++i) {
        const SliceInfo& s = t_.slices[which[i]];
        if (crc[i] != s.crc)
          throw H5Failure(fmt::format("slice {} fails its CRC-32C ({}, MANIFEST says {})", where(s),
                                      hex(crc[i]), hex(s.crc)));
        if (needed && !scratch[i].empty())
          for (const SliceRequest* q : needed->at(which[i]))
            copy_overlap(s.box, scratch[i].data(), q->box, q->out);
      }
      file.close("close");
    } catch (const Unusable& e) {
      throw Unusable(fmt::format("{}: {}", name, e.what()));
    } catch (const H5Failure& e) {
      throw H5Failure(fmt::format("{}: {}", name, e.what()));
    }
  }

  std::string dir_;
  Table t_;
  std::vector<std::vector<size_t>> by_tensor_;
  std::map<std::string, size_t> index_;
  std::vector<bool> index_checked_;  // per file: its /index agrees with the MANIFEST
};

// With `all_indexes`, every file's /index is checked before the state's values are judged, as a
// single file's metadata copy is (a rewritten value is damage first); a restore checks each
// file's when it reads it.
std::unique_ptr<FolderSource> open_source(const std::string& dir, bool all_indexes) {
  auto src = std::make_unique<FolderSource>(dir, read_manifest(dir));
  if (all_indexes) src->check_indexes();
  if (std::string why = absurd_value(header_of(src->table().state)); !why.empty())
    throw Unusable(why);
  return src;
}

}  // namespace

std::string rank_file_name(int rank, int world) {
  return fmt::format("rank-{:05d}-of-{:05d}.h5", rank, world);
}

bool has_manifest(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kManifestName, ec);
}

std::string read_manifest_text(const std::string& dir) {
  const fs::path path = fs::path(dir) / kManifestName;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw H5Failure(
        "it has no MANIFEST: its save never finished (rank 0 writes the manifest after every "
        "rank's file), so it is not a checkpoint");
  try {
    std::optional<std::string> text = read_regular_file(
        path.string(), {kManifestMaxBytes, kExitCheckpoint, "it is not a checkpoint's manifest"});
    if (!text) throw H5Failure("MANIFEST vanished while it was read");
    return *std::move(text);
  } catch (const Error& e) {
    throw H5Failure(e.what());
  }
}

bool has_legacy_manifest(const std::string& dir) {
  // Only its title: the whole manifest is read (and checked) once, by whichever reader it is.
  const fs::path path = fs::path(dir) / kManifestName;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;  // a FIFO would block the open
  const std::string title = std::string(kLegacyTitle) + "\n";
  std::string head(title.size(), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in.gcount() == static_cast<std::streamsize>(head.size()) && head == title;
}

void write_rank_file(const std::string& dir, const RankSnapshot& snap) {
  quiet();
  int world = 0;
  try {
    world = snap.summary().world_size;
  } catch (const CheckpointError& e) {
    throw CheckpointWriteError(fmt::format("cannot write checkpoint {}: {}", dir, e.what()));
  }
  const std::string path = (fs::path(dir) / rank_file_name(snap.rank, world)).string();
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    validate_for_write(snap);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw H5Failure(fmt::format("cannot create the folder: {}", ec.message()));
    ::unlink(tmp.c_str());  // a leftover of an earlier process with our pid
    write_file(tmp, snap);
    fsync_path(tmp, false);
    rename_durably(tmp, path);
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    throw CheckpointWriteError(fmt::format("cannot write checkpoint file {}: {}", path, e.what()));
  }
}

void commit_folder(const std::string& dir, int64_t step, int world, double timeout_s) {
  quiet();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  Table t;
  for (int r = 0; r < world; ++r) {
    const std::string name = rank_file_name(r, world);
    const std::string path = (fs::path(dir) / name).string();
    std::error_code ec;
    // Poll: a background writer cannot wait on the other ranks with a collective.
    while (!fs::exists(path, ec)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw CheckpointWriteError(fmt::format(
            "cannot commit checkpoint {}: rank {}'s file {} did not appear within {:g} s "
            "(its write failed, or the folder is not shared between the hosts: checkpoints "
            "need a file system every rank's host writes to)",
            dir, r, name, timeout_s));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    try {
      Handle f = open_read(path);
      const json j = parse(read_text(f, kIndex), "/index");
      f.close("close");
      if (j.value("format", "") != kFormat ||
          j.at("format_version").get<int>() != kFolderFormatVersion)
        throw H5Failure("it is not a format 5 rank file");
      std::vector<NamedValue> values = values_of_json(j.at("state"));
      const TrainState s = summary_of(values, "its state");
      if (j.at("rank").get<int>() != r || j.at("world_size").get<int>() != world ||
          s.step != step || s.world_size != world)
        throw H5Failure(fmt::format(
            "it holds rank {} of {} at step {}, the commit is for rank {} "
            "of {} at step {}",
            j.at("rank").get<int>(), j.at("world_size").get<int>(), s.step, r, world, step));
      std::vector<TensorInfo> tensors = tensors_of(j.at("tensors"));
      if (r == 0) {
        t.values = std::move(values);
        t.state = s;
        t.state.config_yaml = j.at("config").get<std::string>();
        t.trainrun_version = j.at("trainrun_version").get<std::string>();
        t.created = j.at("created").get<std::string>();
        t.tensors = std::move(tensors);
      } else {
        bool same = tensors.size() == t.tensors.size();
        for (size_t i = 0; same && i < tensors.size(); ++i)
          same = tensors[i].name == t.tensors[i].name && tensors[i].shape == t.tensors[i].shape;
        if (!same) throw H5Failure("its tensor table differs from rank 0's");
        // Every rank puts the same values (state_dict.h): a difference is a bug, not a choice.
        if (values != t.values) throw H5Failure("its named values differ from rank 0's");
      }
      t.files.push_back(name);
      t.elements.push_back(j.at("elements").get<int64_t>());
      for (const json& s : j.at("slices")) t.slices.push_back(slice_of(s, static_cast<size_t>(r)));
    } catch (const std::exception& e) {
      throw CheckpointWriteError(
          fmt::format("cannot commit checkpoint {}: {}: {}", dir, name, e.what()));
    }
  }
  if (std::string why = table_problem(t); !why.empty())
    throw CheckpointWriteError(fmt::format("cannot commit checkpoint {}: {}", dir, why));
  try {
    write_file_durably((fs::path(dir) / kManifestName).string(), manifest_text(t));
  } catch (const std::exception& e) {
    throw CheckpointWriteError(fmt::format("cannot commit checkpoint {}: {}", dir, e.what()));
  }
  // Files of an earlier attempt at this step with another world size: not part of it.
  const std::set<std::string> listed(t.files.begin(), t.files.end());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("rank-") && name.ends_with(".h5") && !listed.contains(name))
      fs::remove(entry.path(), ec);
  }
}

std::unique_ptr<StateSource> open_folder(const std::string& dir, TrainState* state) {
  quiet();
  std::unique_ptr<FolderSource> src = open_source(dir, /*all_indexes=*/false);
  if (state) *state = src->table().state;
  return src;
}

Verdict judge_folder(const std::string& dir) {
  quiet();
  return verdict_of(
      [&] {
        std::unique_ptr<FolderSource> src = open_source(dir, /*all_indexes=*/true);
        src->verify_all();
        Loaded l;
        l.data.state = src->table().state;
        return l;
      },
      nullptr);
}

std::string describe_folder(const std::string& dir) {
  quiet();
  std::string out = "layout: a folder (one file of tensor slices per rank, and MANIFEST)\n";
  try {
    const Table t = read_manifest(dir);
    const TrainState& s = t.state;
    out += fmt::format(
        "format_version: {}\ntrainrun_version: {}\ncreated: {}\nstep: {}\ntokens_seen: {}\n"
        "samples_seen: {}\nseed: {}\nworld_size: {}\nrestarts: {}\nbad_steps_total: {}\n"
        "lr_scale: {}\n",
        kFolderFormatVersion, t.trainrun_version, t.created, s.step, s.tokens_seen, s.samples_seen,
        s.seed, s.world_size, s.restarts, s.bad_steps_total, s.lr_scale);
    // Values a component stored beyond those the summary names.
    const std::vector<NamedValue> known = values_of(s);
    for (const NamedValue& v : t.values)
      if (std::none_of(known.begin(), known.end(),
                       [&](const NamedValue& k) { return k.name == v.name; }))
        out += fmt::format("{}: {}\n", v.name,
                           std::visit([](auto x) { return fmt::format("{}", x); }, v.value));
    int64_t params = 0, model_tensors = 0;
    bool moments = false;
    for (const TensorInfo& x : t.tensors) {
      if (x.name.starts_with("model/")) {
        params += numel(x.shape);
        ++model_tensors;
      }
      moments = moments || x.name.starts_with("optimizer/");
    }
    out += fmt::format("parameters: {} in {} tensors, optimizer moments: {}\n", params,
                       model_tensors, moments ? "yes" : "no");
    out += "files (float32 slices, contiguous; a CRC-32C per slice in MANIFEST):\n";
    for (size_t f = 0; f < t.files.size(); ++f) {
      std::error_code ec;
      const fs::path file = fs::path(dir) / t.files[f];
      const auto size = fs::is_regular_file(file, ec) ? fs::file_size(file, ec) : 0;
      const char* kind =
          fs::exists(fs::symlink_status(file, ec)) ? "not a regular file" : "missing";
      const auto count = std::count_if(t.slices.begin(), t.slices.end(),
                                       [f](const SliceInfo& x) { return x.file == f; });
      out += fmt::format("  {}: {} slices, {} elements, {}\n", t.files[f], count, t.elements[f],
                         ec || !fs::is_regular_file(file, ec)
                             ? kind
                             : fmt::format("{:.1f} MiB", double(size) / (1 << 20)));
    }
    out += "tensors:\n";
    std::vector<int> slices(t.tensors.size(), 0);
    for (const SliceInfo& x : t.slices) ++slices[x.tensor];
    for (size_t i = 0; i < t.tensors.size(); ++i)
      out += fmt::format("  {} {} in {} slice{}\n", t.tensors[i].name,
                         shape_str(t.tensors[i].shape), slices[i], slices[i] == 1 ? "" : "s");
  } catch (const H5Failure& e) {
    out += fmt::format("manifest unreadable: {}\n", e.what());
  }
  return out;
}

}  // namespace trainrun
