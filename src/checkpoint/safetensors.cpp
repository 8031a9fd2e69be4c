// safetensors (safetensors.h): the strict reader and the writer.
#include "trainrun/checkpoint/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "trainrun/core/bf16.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"

namespace trainrun {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

struct Bad : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// IEEE half to float, exactly (every half is a float).
float half_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, frac = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(frac), -24);  // zero and subnormals
  else if (exp == 31)
    v = frac ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(frac | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

SafeDtype dtype_of(const std::string& s, const std::string& tensor) {
  if (s == "F32") return SafeDtype::f32;
  if (s == "F16") return SafeDtype::f16;
  if (s == "BF16") return SafeDtype::bf16;
  throw Bad(fmt::format("tensor {}: dtype {} is not supported (trainrun reads F32, F16 and BF16)",
                        tensor, s.empty() ? "\"\"" : s));
}

uint64_t le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the header, refusing a key given twice in any object (JSON allows it, a reader would
// silently take one of them).
json parse_header(const char* text, size_t n) {
  std::vector<std::set<std::string>> keys;
  const json::parser_callback_t cb = [&keys](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          throw Bad(fmt::format("the header names {} twice", parsed.dump()));
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, text + n, cb);
  } catch (const json::exception& e) {
    throw Bad(fmt::format("the header is not JSON: {}", e.what()));
  }
}

uint64_t unsigned_of(const json& v, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw Bad(fmt::format("{} is {}, not a non-negative integer", what, v.dump()));
  return v.get<uint64_t>();
}

SafeTensorInfo tensor_of(const std::string& name, const json& v) {
  if (name.empty()) throw Bad("a tensor has an empty name");
  if (!v.is_object()) throw Bad(fmt::format("tensor {} is {}, not an object", name, v.dump()));
  for (const auto& [key, _] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      throw Bad(fmt::format("tensor {} has an unknown field {}", name, key));
  if (!v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
      !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2)
    throw Bad(fmt::format(
        "tensor {} needs a string dtype, an array shape and data_offsets [begin, end]", name));
  SafeTensorInfo t;
  t.name = name;
  t.dtype = dtype_of(v["dtype"].get<std::string>(), name);
  for (const json& d : v["shape"]) {
    const uint64_t n = unsigned_of(d, fmt::format("tensor {}'s shape", name));
    if (n > (uint64_t{1} << 46))
      throw Bad(fmt::format("tensor {}: dimension {} is beyond any file", name, n));
    t.shape.push_back(static_cast<int64_t>(n));
  }
  t.begin = unsigned_of(v["data_offsets"][0], fmt::format("tensor {}'s first offset", name));
  t.end = unsigned_of(v["data_offsets"][1], fmt::format("tensor {}'s end offset", name));
  if (t.end < t.begin)
    throw Bad(fmt::format("tensor {}: data_offsets [{}, {}] end before they begin", name, t.begin,
                          t.end));
  // The shape's bytes; a product past 64 bits is simply more than any span.
  uint64_t bytes = safe_dtype_bytes(t.dtype);
  bool overflow = false;
  for (int64_t d : t.shape)
    overflow = overflow || __builtin_mul_overflow(bytes, uint64_t(d), &bytes);
  const uint64_t span = t.end - t.begin;
  if (overflow || bytes != span)
    throw Bad(fmt::format("tensor {}: its shape and dtype need {} bytes, data_offsets give {}",
                          name, overflow ? std::string("more than 2^64") : std::to_string(bytes),
                          span));
  return t;
}

}  // namespace

const char* safe_dtype_name(SafeDtype d) {
  switch (d) {
    case SafeDtype::f32:
      return "F32";
    case SafeDtype::f16:
      return "F16";
    case SafeDtype::bf16:
      return "BF16";
  }
  return "?";
}

size_t safe_dtype_bytes(SafeDtype d) {
  return d == SafeDtype::f32 ? 4 : 2;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  try {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Bad(std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Bad("it is not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ < 8) {
      ::close(fd);
      throw Bad(fmt::format("it has {} bytes, fewer than the 8 of the header's length", size_));
    }
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      throw Bad(fmt::format("cannot map it: {}", std::strerror(errno)));
    }
    const auto* base = static_cast<const unsigned char*>(map_);
    const uint64_t n = le64(base);
    if (n > kSafetensorsMaxHeader)
      throw Bad(fmt::format("its header would be {} bytes, above the limit of {}", n,
                            kSafetensorsMaxHeader));
    if (n > size_ - 8)
      throw Bad(fmt::format("its header would be {} bytes, the file has {} after the length", n,
                            size_ - 8));
    const json header = parse_header(reinterpret_cast<const char*>(base + 8), n);
    if (!header.is_object()) throw Bad("the header is not a JSON object");
    data_ = base + 8 + n;
    const uint64_t data_size = size_ - 8 - n;
    for (const auto& [key, v] : header.items()) {
      if (key == "__metadata__") {
        if (!v.is_object()) throw Bad("__metadata__ is not an object");
        for (const auto& [k, s] : v.items()) {
          if (!s.is_string()) throw Bad(fmt::format("__metadata__ {} is not a string", k));
          metadata_[k] = s.get<std::string>();
        }
        continue;
      }
      tensors_.push_back(tensor_of(key, v));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    for (const SafeTensorInfo& t : tensors_) {
      if (t.begin != at)
        throw Bad(fmt::format("tensor {} begins at byte {} of the data, {} ({})", t.name, t.begin,
                              t.begin < at ? "inside the tensor before it" : "after a hole at",
                              at));
      at = t.end;
    }
    if (at != data_size)
      throw Bad(fmt::format("the tensors' data ends at byte {}, the file's at {}", at, data_size));
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (const Bad& e) {
    if (map_) ::munmap(map_, size_);
    throw CheckpointError(fmt::format("safetensors file {} cannot be read: {}", path, e.what()));
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

const SafeTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  const SafeTensorInfo* t = find(name);
  if (!t) throw CheckpointError(fmt::format("safetensors file {} holds no tensor {}", path_, name));
  const unsigned char* p = bytes(*t);
  const size_t n = (t->end - t->begin) / safe_dtype_bytes(t->dtype);
  for (size_t i = 0; i < n; ++i) {
    switch (t->dtype) {
      case SafeDtype::f32:
        std::memcpy(out + i, p + 4 * i, 4);
        break;
      case SafeDtype::f16:
      case SafeDtype::bf16: {
        const uint16_t h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
        out[i] = t->dtype == SafeDtype::f16 ? half_to_f32(h) : bf16_to_f32(h);
        break;
      }
    }
  }
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       SafeDtype dtype, const std::map<std::string, std::string>& metadata) {
  if (dtype == SafeDtype::f16)
    throw std::invalid_argument("write_safetensors: F16 is read, not written");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  std::set<std::string> names;
  for (const SafeTensorOut& t : tensors) {
    if (t.name.empty() || !names.insert(t.name).second || t.name == "__metadata__")
      throw std::invalid_argument("write_safetensors: tensor name `" + t.name +
                                  "` is empty, repeated or reserved");
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    const uint64_t bytes = n * safe_dtype_bytes(dtype);
    header[t.name] = {
        {"dtype", safe_dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned, as the reference does
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    std::FILE* f = std::fopen(tmp.c_str(), "wbx");
    if (!f) throw std::runtime_error(std::strerror(errno));
    bool ok = true;
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
    ok = ok && std::fwrite(len, 1, 8, f) == 8;
    ok = ok && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    std::vector<unsigned char> buf;
    for (const SafeTensorOut& t : tensors) {
      size_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<size_t>(d);
      constexpr size_t kChunk = size_t{1} << 20;  // elements per write
      for (size_t i = 0; ok && i < n; i += kChunk) {
        const size_t k = std::min(kChunk, n - i);
        if (dtype == SafeDtype::f32) {
          ok = std::fwrite(t.data + i, 4, k, f) == k;  // little-endian hosts only (x86, arm)
          continue;
        }
        buf.resize(2 * k);
        for (size_t j = 0; j < k; ++j) {
          const uint16_t h = bf16_from_f32(t.data[i + j]);
          buf[2 * j] = static_cast<unsigned char>(h);
          buf[2 * j + 1] = static_cast<unsigned char>(h >> 8);
        }
        ok = std::fwrite(buf.data(), 2, k, f) == k;
      }
    }
    const int err = ok ? 0 : errno;
    if (std::fclose(f) != 0 || !ok) throw std::runtime_error(std::strerror(err ? err : errno));
    fsync_path(tmp, false);
    rename_durably(tmp, path);
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    throw CheckpointWriteError(fmt::format("cannot write {}: {}", path, e.what()));
  }
}

SafetensorsModel::SafetensorsModel(const std::string& dir) {
  const fs::path index = fs::path(dir) / kIndexName;
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    const fs::path single = fs::is_directory(dir, ec) ? fs::path(dir) / kSingleName : fs::path(dir);
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const SafeTensorInfo& t : files_.back()->tensors()) where_[t.name] = files_.back().get();
    return;
  }
  json j;
  try {
    const std::string text =
        read_regular_file(index.string(),
                          {kSafetensorsMaxHeader, kExitCheckpoint, "it is not a safetensors index"})
            .value_or("");
    j = parse_header(text.data(), text.size());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Bad("it has no weight_map object");
  } catch (const Bad& e) {
    throw CheckpointError(fmt::format("{} cannot be read: {}", index.string(), e.what()));
  }
  std::map<std::string, std::string> wanted;  // tensor -> file
  std::map<std::string, SafetensorsFile*> opened;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      throw CheckpointError(fmt::format("{}: tensor {} names {}, not a file beside the index",
                                        index.string(), tensor, file.dump()));
    const std::string name = file.get<std::string>();
    if (!opened.contains(name)) {
      files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / name).string()));
      opened[name] = files_.back().get();
    }
    const SafetensorsFile* f = opened[name];
    if (!f->find(tensor))
      throw CheckpointError(
          fmt::format("{} says {} holds tensor {}; it does not", index.string(), name, tensor));
    where_[tensor] = f;
  }
  for (const auto& [name, f] : opened)
    for (const SafeTensorInfo& t : f->tensors())
      if (!where_.contains(t.name) || where_.at(t.name) != f)
        throw CheckpointError(fmt::format("{} also holds tensor {}, which {} puts elsewhere",
                                          f->path(), t.name, index.string()));
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

const SafeTensorInfo* SafetensorsModel::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second->find(name);
}

void SafetensorsModel::read_f32(const std::string& name, float* out) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw CheckpointError(fmt::format("the model holds no tensor {}", name));
  it->second->read_f32(name, out);
}

void write_safetensors_model(const std::string& dir, const std::vector<SafeTensorOut>& tensors,
                             SafeDtype dtype, uint64_t max_shard_bytes) {
  std::vector<std::vector<SafeTensorOut>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const SafeTensorOut& t : tensors) {
    uint64_t bytes = safe_dtype_bytes(dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointWriteError(fmt::format("cannot create {}: {}", dir, ec.message()));
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / kSingleName).string(), shards[0], dtype, meta);
    return;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", nlohmann::ordered_json::object()}};
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    write_safetensors((fs::path(dir) / name).string(), shards[s], dtype, meta);
    for (const SafeTensorOut& t : shards[s]) index["weight_map"][t.name] = name;
  }
  try {
    write_file_durably((fs::path(dir) / kIndexName).string(), index.dump(2) + "\n");
  } catch (const std::exception& e) {
    throw CheckpointWriteError(e.what());
  }
}

}  // namespace trainrun
