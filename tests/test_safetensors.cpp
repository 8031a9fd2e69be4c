// safetensors (trainrun/checkpoint/safetensors.h): round trips in F32 and BF16, F16 read exactly,
// a model sharded over files by its index, each refusal of a bad file by name, and a mutation
// loop: a damaged file is refused with a CheckpointError, never a crash (the ASan suite runs it).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "trainrun/checkpoint/safetensors.h"
#include "trainrun/core/bf16.h"
#include "trainrun/core/errors.h"

using namespace trainrun;
using trainrun::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void put(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// A file from a header text and data bytes, as another writer would make it.
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

}  // namespace

TEST_CASE("safetensors: F32 and BF16 round trips, tensors and metadata by name") {
  TempDir tmp;
  std::vector<float> a(12), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * static_cast<float>(i) - 0.37f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::ldexp(1.0f, static_cast<int>(i) - 2);
  const std::vector<SafeTensorOut> out = {{"model.w", {3, 4}, a.data()}, {"b", {5}, b.data()}};
  for (SafeDtype dt : {SafeDtype::f32, SafeDtype::bf16}) {
    CAPTURE(safe_dtype_name(dt));
    const std::string path = (fs::path(tmp.str()) / "m.safetensors").string();
    write_safetensors(path, out, dt, {{"format", "pt"}});
    const SafetensorsFile f(path);
    REQUIRE(f.tensors().size() == 2);
    CHECK(f.tensors()[0].name == "model.w");  // in the order of their data
    CHECK(f.tensors()[0].shape == std::vector<int64_t>{3, 4});
    CHECK(f.tensors()[0].dtype == dt);
    CHECK(f.metadata().at("format") == "pt");
    std::vector<float> got(12);
    f.read_f32("model.w", got.data());
    for (size_t i = 0; i < a.size(); ++i)
      CHECK(got[i] == (dt == SafeDtype::f32 ? a[i] : round_to_bf16(a[i])));
    // The header is padded so the data starts 8-byte aligned.
    const std::string raw = slurp(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[size_t(i)]);
    CHECK((8 + n) % 8 == 0);
    CHECK_THROWS_WITH_AS(f.read_f32("nope", got.data()), doctest::Contains("holds no tensor nope"),
                         CheckpointError);
    fs::remove(path);
  }
}

TEST_CASE("safetensors: F16 is read exactly, with zeros, subnormals and infinities") {
  TempDir tmp;
  // 1.0, -2.5, the smallest subnormal, 65504 (the largest half), +inf, -0.
  const uint16_t halves[] = {0x3c00, 0xc100, 0x0001, 0x7bff, 0x7c00, 0x8000};
  std::string data;
  for (uint16_t h : halves) {
    data += static_cast<char>(h & 0xff);
    data += static_cast<char>(h >> 8);
  }
  const fs::path p = fs::path(tmp.str()) / "h.safetensors";
  put(p, file_of(R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]}})", data));
  std::vector<float> got(6);
  SafetensorsFile(p.string()).read_f32("h", got.data());
  CHECK(got[0] == 1.0f);
  CHECK(got[1] == -2.5f);
  CHECK(got[2] == std::ldexp(1.0f, -24));
  CHECK(got[3] == 65504.0f);
  CHECK(std::isinf(got[4]));
  CHECK((got[5] == 0.0f && std::signbit(got[5])));
}

TEST_CASE("safetensors: each way a file is wrong is refused, naming it") {
  TempDir tmp;
  const fs::path p = fs::path(tmp.str()) / "bad.safetensors";
  const std::string four(4, 'x'), eight(8, 'x');
  struct Case {
    const char* why;
    std::string bytes;
    const char* says;
  };
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32 bytes of header
  const Case cases[] = {
      {"short", "abc", "fewer than the 8"},
      {"header bound", huge, "above the limit"},
      {"header past the end", file_of("{}", "").substr(0, 8) + "{", "the file has 1"},
      {"not JSON", file_of("{oops", ""), "not JSON"},
      {"not an object", file_of("[1,2]", ""), "not a JSON object"},
      {"a key twice",
       file_of(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
           four),
       "names \"a\" twice"},
      {"unknown dtype", file_of(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", eight),
       "dtype I64 is not supported"},
      {"shape and span differ",
       file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "need 12 bytes, data_offsets give 8"},
      {"a hole", file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "after a hole"},
      {"an overlap",
       file_of(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       "inside the tensor before it"},
      {"trailing bytes",
       file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "ends at byte 4, the file's at 8"},
      {"truncated data", file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four),
       "ends at byte 8, the file's at 4"},
      {"a shape past 64 bits",
       file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
               four),
       "more than 2^64 bytes"},
      {"a dimension past any file",
       file_of(R"({"a":{"dtype":"F32","shape":[140737488355328],"data_offsets":[0,4]}})", four),
       "beyond any file"},
      {"negative dimension",
       file_of(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four),
       "not a non-negative integer"},
      {"offsets backwards",
       file_of(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", four),
       "end before they begin"},
      {"a huge shape",
       file_of(R"({"a":{"dtype":"F32","shape":[65536,65536,64],"data_offsets":[0,4]}})", four),
       "need 1099511627776 bytes, data_offsets give 4"},
      {"an unknown field",
       file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", four),
       "unknown field x"},
      {"metadata not strings", file_of(R"({"__metadata__":{"k":1}})", ""), "is not a string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.why);
    put(p, c.bytes);
    CHECK_THROWS_WITH_AS(SafetensorsFile(p.string()), doctest::Contains(c.says), CheckpointError);
  }
  CHECK_THROWS_WITH_AS(SafetensorsFile(tmp.str()), doctest::Contains("not a regular file"),
                       CheckpointError);
}

TEST_CASE("safetensors: a model sharded by its index, written and read back") {
  TempDir tmp;
  std::vector<std::vector<float>> data(5, std::vector<float>(256));
  std::vector<SafeTensorOut> out;
  for (size_t t = 0; t < data.size(); ++t) {
    for (size_t i = 0; i < 256; ++i) data[t][i] = static_cast<float>(t * 1000 + i);
    out.push_back({"layers." + std::to_string(t) + ".w", {16, 16}, data[t].data()});
  }
  // 1 KiB a tensor, at most 2.5 KiB a file: three files of 2, 2 and 1 tensors.
  write_safetensors_model(tmp.str(), out, SafeDtype::f32, 2560);
  CHECK(fs::exists(fs::path(tmp.str()) / "model-00003-of-00003.safetensors"));
  CHECK_FALSE(fs::exists(fs::path(tmp.str()) / "model.safetensors"));
  const SafetensorsModel m(tmp.str());
  CHECK(m.names().size() == 5);
  std::vector<float> got(256);
  m.read_f32("layers.4.w", got.data());
  CHECK(got == data[4]);
  // The index naming a file that does not hold the tensor is refused.
  const fs::path index = fs::path(tmp.str()) / "model.safetensors.index.json";
  std::string text = slurp(index);
  const auto at = text.find("model-00003-of-00003");
  text.replace(at, 20, "model-00001-of-00003");
  put(index, text);
  CHECK_THROWS_WITH_AS(SafetensorsModel(tmp.str()), doctest::Contains("does not"), CheckpointError);
  // One file, no index.
  TempDir one;
  write_safetensors_model(one.str(), out, SafeDtype::bf16);
  CHECK(fs::exists(fs::path(one.str()) / "model.safetensors"));
  CHECK(SafetensorsModel(one.str()).names().size() == 5);
}

TEST_CASE("safetensors: mutated files are refused or read, never a crash") {
  TempDir tmp;
  std::vector<float> a(40, 1.5f), b(7, -2.0f);
  const fs::path good = fs::path(tmp.str()) / "good.safetensors";
  write_safetensors(good.string(), {{"a", {5, 8}, a.data()}, {"b", {7}, b.data()}}, SafeDtype::bf16,
                    {{"k", "v"}});
  const std::string base = slurp(good);
  const fs::path p = fs::path(tmp.str()) / "m.safetensors";
  std::mt19937_64 rng(7);
  int refused = 0, read = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string m = base;
    switch (rng() % 4) {
      case 0:  // flip bytes anywhere, mostly in the header
        for (int k = 0; k < 1 + int(rng() % 4); ++k)
          m[rng() % std::min<size_t>(m.size(), 8 + 160)] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // truncate
        m.resize(rng() % m.size());
        break;
      case 2:  // a digit of the header changed
        for (size_t k = 8; k < m.size(); ++k)
          if (std::isdigit(static_cast<unsigned char>(m[k])) && rng() % 6 == 0) {
            m[k] = static_cast<char>('0' + rng() % 10);
            break;
          }
        break;
      default:  // the length field itself
        m[rng() % 8] = static_cast<char>(rng());
        break;
    }
    put(p, m);
    try {
      const SafetensorsFile f(p.string());
      std::vector<float> out;
      for (const SafeTensorInfo& t : f.tensors()) {
        out.resize((t.end - t.begin) / safe_dtype_bytes(t.dtype));
        f.read_f32(t.name, out.data());
      }
      ++read;
    } catch (const CheckpointError& e) {
      CHECK(std::string(e.what()).find("cannot be read") != std::string::npos);
      ++refused;
    }
  }
  CHECK(refused > 1000);  // most mutations break the structure
  CHECK(read > 0);        // some change only values, which stay readable
}
