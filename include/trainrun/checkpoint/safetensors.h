// safetensors, Hugging Face's tensor file (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of a JSON object (each tensor's dtype, shape and
// data_offsets [begin, end) into the data; an optional "__metadata__" of strings), then the data.
// Written here small and strict, since no Debian package has it: a file is checked whole when it
// is opened (the header's bound, 100 MB as the reference implementation's; a JSON object with
// no key twice; every dtype known; every shape's bytes equal to its offsets' span; the spans
// back to back from 0 with no hole and no overlap, ending where the file does) and is read from
// a read-only mapping. A model of several files has an index beside them,
// model.safetensors.index.json, whose weight_map names each tensor's file.
//
// Thread safety: an open file is immutable; read it from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trainrun {

// The dtypes read (others are refused by name: "I64"); F32 and BF16 are also written.
enum class SafeDtype { f32, f16, bf16 };
const char* safe_dtype_name(SafeDtype d);  // "F32", "F16", "BF16"
size_t safe_dtype_bytes(SafeDtype d);

struct SafeTensorInfo {
  std::string name;
  SafeDtype dtype = SafeDtype::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // its bytes in the data section
};

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsFile {
 public:
  // Maps and checks `path`. Throws CheckpointError (exit 3) naming the file and what is wrong.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In the header's order of their data (by offset).
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor `name`, or null.
  const SafeTensorInfo* find(const std::string& name) const;
  // Its elements as float32 (F16 and BF16 widened exactly) into out[numel]. Throws
  // CheckpointError for a name the file does not hold.
  void read_f32(const std::string& name, float* out) const;
  // Its bytes as stored.
  const unsigned char* bytes(const SafeTensorInfo& t) const { return data_ + t.begin; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  const unsigned char* data_ = nullptr;  // the data section
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: float32 elements, stored as the file's dtype (BF16: rounded to nearest
// even).
struct SafeTensorOut {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes one file durably (a temporary name, fsync, rename): the tensors in the given order.
// Throws CheckpointWriteError naming the path; nothing is left at `path` then.
void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       SafeDtype dtype, const std::map<std::string, std::string>& metadata = {});

// A model in `dir`: model.safetensors, or the files its model.safetensors.index.json names,
// each checked as above and the index against them (every tensor in the file it names, no
// tensor in two files, no file the index does not name holding one of its tensors).
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir);
  std::vector<std::string> names() const;  // every tensor, sorted
  const SafeTensorInfo* find(const std::string& name) const;
  void read_f32(const std::string& name, float* out) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

// Writes the tensors into `dir` as one model.safetensors, or, when their bytes exceed
// `max_shard_bytes`, as model-0000K-of-0000N.safetensors files of at most that many bytes each
// (a tensor larger than that alone in its file) with model.safetensors.index.json.
void write_safetensors_model(const std::string& dir, const std::vector<SafeTensorOut>& tensors,
                             SafeDtype dtype, uint64_t max_shard_bytes = uint64_t{5} << 30);

}  // namespace trainrun
