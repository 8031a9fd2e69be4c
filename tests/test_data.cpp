// Data: shard formats, dataset sources, every DataError, the Markov source and the loader.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/markov.h"
#include "trainrun/data/sample_stream.h"
#include "trainrun/data/tokenizer.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

using trainrun::testing::TempDir;

// One source in windows order: the stream a data.train run reads.
std::unique_ptr<SampleStream> windows(std::shared_ptr<const TokenDataset> ds, uint64_t seed,
                                      int T) {
  std::vector<SampleStream::Source> sources;
  sources.push_back({"data", 1.0, std::move(ds)});
  return std::make_unique<SampleStream>(std::move(sources), DataOrder::windows, seed, T);
}

std::vector<int32_t> ramp(int64_t n, int64_t mod, int64_t offset = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7 + offset) % mod);
  return v;
}

std::vector<int32_t> read_all(const TokenDataset& ds) {
  std::vector<int32_t> v(static_cast<size_t>(ds.num_tokens()));
  ds.read(0, ds.num_tokens(), v.data());
  return v;
}

// Both splits of a shard source with an explicit val: train reads data.train whole.
DataConfig shards(const std::string& train, const std::string& val = "") {
  DataConfig d;
  d.train = train;
  d.val = val.empty() ? train : val;
  return d;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// llm.c's dev/data/data_common.py layout: 256 int32 (magic, version, count), then the tokens.
template <typename T = uint16_t>
void write_llmc(const std::string& path, const std::vector<T>& toks, int32_t version = 1,
                int32_t count = -1) {
  int32_t header[256] = {};
  header[0] = sizeof(T) == 2 ? 20240520 : 20240801;  // GPT-2 (uint16) or Llama 3 (uint32)
  header[1] = version;
  header[2] = count < 0 ? static_cast<int32_t>(toks.size()) : count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(toks.data()),
            static_cast<std::streamsize>(toks.size() * sizeof(T)));
}

// Runs f, expects a DataError (exit code 3) whose message contains every one of parts.
template <typename F>
void expect_data_error(F&& f, const std::vector<std::string>& parts) {
  bool thrown = false;
  try {
    f();
  } catch (const DataError& e) {
    thrown = true;
    CHECK(e.code() == 3);
    const std::string msg = e.what();
    for (const auto& p : parts) {
      INFO("message: " << msg);
      CHECK_MESSAGE(msg.find(p) != std::string::npos, "missing '" << p << "'");
    }
  }
  CHECK_MESSAGE(thrown, "no DataError thrown");
}

// Plug-in estimate of H(next | previous `order` symbols), nats.
double empirical_conditional_entropy(const std::vector<int32_t>& s, int alphabet, int order) {
  const int64_t contexts = order == 1 ? alphabet : int64_t{alphabet} * alphabet;
  std::vector<int64_t> joint(static_cast<size_t>(contexts * alphabet)),
      ctx(static_cast<size_t>(contexts));
  for (size_t t = static_cast<size_t>(order); t < s.size(); ++t) {
    const int64_t c = order == 1 ? s[t - 1] : int64_t{s[t - 2]} * alphabet + s[t - 1];
    ++joint[c * alphabet + s[t]];
    ++ctx[c];
  }
  const double n = static_cast<double>(s.size() - static_cast<size_t>(order));
  double h = 0;
  for (int64_t c = 0; c < contexts; ++c)
    for (int a = 0; a < alphabet; ++a) {
      const double j = static_cast<double>(joint[c * alphabet + a]);
      if (j > 0) h -= j / n * std::log(j / static_cast<double>(ctx[c]));
    }
  return h;
}

}  // namespace

TEST_CASE("trainrun shards round-trip at each token width, smallest width chosen") {
  TempDir tmp;
  struct Case {
    int vocab;
    int width;
  };
  for (const Case c : {Case{256, 1}, Case{50257, 2}, Case{70000, 4}}) {
    CAPTURE(c.vocab);
    std::string name = "w";  // (not "w" + ...: GCC 12 warns falsely on that, -Wrestrict)
    name += std::to_string(c.width) + ".bin";
    const auto path = tmp / name;
    auto toks = ramp(3001, c.vocab, 5);
    toks.back() = c.vocab - 1;  // the largest id must fit the chosen width
    write_token_shard(path, toks, c.vocab);
    CHECK(fs::file_size(path) == 64 + toks.size() * static_cast<size_t>(c.width));
    const auto ds = open_dataset(shards(path), Split::train, c.vocab, 1);
    CHECK(ds->num_tokens() == 3001);
    CHECK(read_all(*ds) == toks);
    CHECK(std::isnan(ds->entropy_rate()));
    CHECK(ds->describe().find("1 shard, 3001 tokens") != std::string::npos);
    CHECK(ds->describe().find(path) != std::string::npos);
  }
  // No temporary file is left beside the shard.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path)) ++files;
  CHECK(files == 3);
}

TEST_CASE("the largest token id fits; the header is little-endian with the documented layout") {
  TempDir tmp;
  const auto path = tmp / "edge.bin";
  write_token_shard(path, {0, 255, 17}, 256);
  const std::string b = slurp(path);
  REQUIRE(b.size() == 67);
  CHECK(b.substr(0, 8) == "TRNTOKEN");
  uint32_t version, dtype, vocab;
  uint64_t count;
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(&dtype, b.data() + 12, 4);
  std::memcpy(&count, b.data() + 16, 8);
  std::memcpy(&vocab, b.data() + 24, 4);
  CHECK(version == 1);
  CHECK(dtype == 1);
  CHECK(count == 3);
  CHECK(vocab == 256);
  CHECK(static_cast<unsigned char>(b[65]) == 255);
  CHECK(read_all(*open_dataset(shards(path), Split::val, 256, 0)) ==
        std::vector<int32_t>{0, 255, 17});
}

TEST_CASE("llm.c shards are read unchanged") {
  TempDir tmp;
  std::vector<uint16_t> toks(5000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>((i * 131) % 50257);
  write_llmc(tmp / "fineweb_train_000001.bin", toks);
  const auto ds = open_dataset(shards(tmp / "fineweb_train_000001.bin"), Split::train, 50257, 0);
  REQUIRE(ds->num_tokens() == 5000);
  const auto got = read_all(*ds);
  CHECK(std::equal(got.begin(), got.end(), toks.begin()));

  std::vector<uint32_t> llama(3000);
  for (size_t i = 0; i < llama.size(); ++i) llama[i] = static_cast<uint32_t>((i * 7919) % 128256);
  write_llmc(tmp / "llama.bin", llama, 7);
  const auto got32 = read_all(*open_dataset(shards(tmp / "llama.bin"), Split::train, 128256, 0));
  REQUIRE(got32.size() == 3000);
  CHECK(std::equal(got32.begin(), got32.end(), llama.begin()));
}

TEST_CASE("a directory or a glob reads several shards as one stream in name order") {
  TempDir tmp;
  fs::create_directory(tmp / "d");
  // Written out of order, mixed formats; a non-.bin file in the directory is ignored.
  write_token_shard(tmp / "d/s_02.bin", ramp(300, 1000, 2), 1000);
  write_token_shard(tmp / "d/s_00.bin", ramp(100, 1000, 0), 1000);
  write_llmc(tmp / "d/s_01.bin", std::vector<uint16_t>(200, 999));
  write_bytes(tmp / "d/README.txt", "not a shard");
  std::vector<int32_t> want = ramp(100, 1000, 0);
  want.insert(want.end(), 200, 999);
  const auto third = ramp(300, 1000, 2);
  want.insert(want.end(), third.begin(), third.end());

  for (const auto& spec : {tmp / "d", tmp / "d/s_*.bin", tmp / "d/s_0[0-2].bin"}) {
    CAPTURE(spec);
    const auto ds = open_dataset(shards(spec), Split::train, 1000, 0);
    CHECK(ds->num_tokens() == 600);
    CHECK(read_all(*ds) == want);
    CHECK(ds->describe().find("3 shards, 600 tokens") != std::string::npos);
    // A read spanning all three shards.
    std::vector<int32_t> mid(250);
    ds->read(90, 250, mid.data());
    CHECK(std::equal(mid.begin(), mid.end(), want.begin() + 90));
  }
  // data.val picks its own files.
  const auto val =
      open_dataset(shards(tmp / "d/s_0[12].bin", tmp / "d/s_00.bin"), Split::val, 1000, 0);
  CHECK(read_all(*val) == ramp(100, 1000, 0));
}

TEST_CASE("without data.val, val is the last val_fraction of the train stream") {
  TempDir tmp;
  const auto toks = ramp(1000, 256);
  write_token_shard(tmp / "t.bin", toks, 256);
  DataConfig d;
  d.train = tmp / "t.bin";
  d.val_fraction = 0.1;
  const auto train = open_dataset(d, Split::train, 256, 0);
  const auto val = open_dataset(d, Split::val, 256, 0);
  CHECK(train->num_tokens() == 900);
  CHECK(val->num_tokens() == 100);
  CHECK(read_all(*train) == std::vector<int32_t>(toks.begin(), toks.begin() + 900));
  CHECK(read_all(*val) == std::vector<int32_t>(toks.begin() + 900, toks.end()));
  d.val_fraction = 0;
  CHECK(open_dataset(d, Split::train, 256, 0)->num_tokens() == 1000);
  expect_data_error([&] { open_dataset(d, Split::val, 256, 0); },
                    {"val split is empty", "data.val"});
}

TEST_CASE("each bad input is a DataError (exit 3) naming the file, the problem and the fix") {
  TempDir tmp;
  const auto good = tmp / "good.bin";
  write_token_shard(good, ramp(2000, 512), 512);

  SUBCASE("missing file") {
    expect_data_error(
        [&] { open_dataset(shards(tmp / "nope.bin"), Split::train, 512, 0); },
        {"data.train='" + tmp / "nope.bin" + "'", "no such file", "trainrun data prepare"});
  }
  SUBCASE("empty glob") {
    const auto pattern = tmp / "x*.bin";
    expect_data_error([&] { open_dataset(shards(pattern), Split::train, 512, 0); },
                      {"no files match data.train='" + pattern + "'"});
  }
  SUBCASE("directory without shards") {
    fs::create_directory(tmp / "empty");
    expect_data_error([&] { open_dataset(shards(tmp / "empty"), Split::train, 512, 0); },
                      {tmp / "empty", "no *.bin"});
  }
  SUBCASE("wrong magic") {
    write_bytes(tmp / "junk.bin", std::string(2000, 'x'));
    expect_data_error([&] { open_dataset(shards(tmp / "junk.bin"), Split::train, 512, 0); },
                      {tmp / "junk.bin", "not a trainrun or llm.c token shard (magic 78 78"});
  }
  SUBCASE("too short for any header") {
    write_bytes(tmp / "tiny.bin", "TRN");
    expect_data_error([&] { open_dataset(shards(tmp / "tiny.bin"), Split::train, 512, 0); },
                      {tmp / "tiny.bin", "too short"});
  }
  SUBCASE("unsupported trainrun version") {
    std::string b = slurp(good);
    b[8] = 9;
    write_bytes(tmp / "v9.bin", b);
    expect_data_error([&] { open_dataset(shards(tmp / "v9.bin"), Split::train, 512, 0); },
                      {tmp / "v9.bin", "version 9 is not supported"});
  }
  SUBCASE("unsupported llm.c version") {
    write_llmc(tmp / "llmc.bin", std::vector<uint16_t>(10, 1), 3);
    expect_data_error([&] { open_dataset(shards(tmp / "llmc.bin"), Split::train, 512, 0); },
                      {tmp / "llmc.bin", "llm.c shard version 3 is not supported"});
  }
  SUBCASE("truncated trainrun shard") {
    const std::string b = slurp(good);
    write_bytes(tmp / "cut.bin", b.substr(0, b.size() - 7));
    expect_data_error([&] { open_dataset(shards(tmp / "cut.bin"), Split::train, 512, 0); },
                      {tmp / "cut.bin", "truncated", "2000 tokens"});
  }
  SUBCASE("truncated llm.c shard") {
    write_llmc(tmp / "cut2.bin", std::vector<uint16_t>(10, 1), 1, 11);
    expect_data_error([&] { open_dataset(shards(tmp / "cut2.bin"), Split::train, 512, 0); },
                      {tmp / "cut2.bin", "truncated", "11 tokens"});
  }
  SUBCASE("bytes after the announced tokens") {
    write_bytes(tmp / "long.bin", slurp(good) + "zz");
    expect_data_error([&] { open_dataset(shards(tmp / "long.bin"), Split::train, 512, 0); },
                      {tmp / "long.bin", "2 unexpected bytes"});
  }
  SUBCASE("token >= vocab_size") {
    auto toks = ramp(3000, 256);
    toks[1234] = 300;
    toks[2000] = 400;
    write_token_shard(tmp / "big.bin", toks, 512);
    expect_data_error([&] { open_dataset(shards(tmp / "big.bin"), Split::train, 256, 0); },
                      {tmp / "big.bin", "token 300 at position 1234 >= model.vocab_size 256",
                       "model.vocab_size >= 401"});
    // The same file is fine for a vocabulary that holds it.
    CHECK(open_dataset(shards(tmp / "big.bin"), Split::train, 401, 0)->num_tokens() == 3000);
  }
  SUBCASE("dataset shorter than seq_len + 1") {
    write_token_shard(tmp / "short.bin", ramp(64, 256), 256);
    std::shared_ptr<const TokenDataset> ds =
        open_dataset(shards(tmp / "short.bin"), Split::train, 256, 0);
    CHECK_NOTHROW(windows(ds, 0, 63));
    expect_data_error([&] { windows(ds, 0, 64); },
                      {tmp / "short.bin", "64 tokens, fewer than model.seq_len + 1 = 65"});
  }
  SUBCASE("text needs a byte vocabulary") {
    write_bytes(tmp / "t.txt", "hello world");
    DataConfig d;
    d.text = tmp / "t.txt";
    expect_data_error([&] { open_dataset(d, Split::train, 100, 0); },
                      {tmp / "t.txt", "set model.vocab_size >= 256"});
    d.text = tmp / "missing.txt";
    expect_data_error([&] { open_dataset(d, Split::train, 256, 0); },
                      {tmp / "missing.txt", "cannot read"});
  }
  SUBCASE("source selection") {
    DataConfig d;
    expect_data_error([&] { open_dataset(d, Split::train, 256, 0); }, {"no data", "data.train"});
    d.synthetic = "markov";
    d.text = "a.txt";
    expect_data_error([&] { open_dataset(d, Split::train, 256, 0); }, {"only one of"});
    d.text.clear();
    d.synthetic = "zipf";
    expect_data_error([&] { open_dataset(d, Split::train, 256, 0); },
                      {"data.synthetic='zipf'", "markov"});
    d.synthetic = "markov";
    d.markov_order = 3;
    expect_data_error([&] { open_dataset(d, Split::train, 256, 0); },
                      {"data.markov_order=3", "1 or 2"});
  }
}

TEST_CASE("data.text and shards must be regular files: devices, FIFOs, directories are refused") {
  TempDir tmp;
  const std::string fifo = tmp / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // opening it blocking would wait for a writer
  for (const std::string& path : {std::string("/dev/zero"), fifo, tmp.str()}) {
    CAPTURE(path);
    DataConfig d;
    d.text = path;
    expect_data_error([&] { open_dataset(d, Split::train, 256, 0); },
                      {"data.text='" + path + "'", "not a regular file"});
    if (path != tmp.str())  // a directory of shards is a valid data.train
      expect_data_error([&] { open_dataset(shards(path), Split::train, 512, 0); },
                        {path, "not a regular file"});
  }
}

TEST_CASE("data.text: byte tokens, train is the first 1 - val_fraction") {
  TempDir tmp;
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>((i * 37) % 256);  // bytes >= 128 too
  write_bytes(tmp / "t.txt", text);
  DataConfig d;
  d.text = tmp / "t.txt";
  d.val_fraction = 0.25;
  const auto train = open_dataset(d, Split::train, 256, 0);
  const auto val = open_dataset(d, Split::val, 256, 0);
  REQUIRE(train->num_tokens() == 750);
  REQUIRE(val->num_tokens() == 250);
  const auto a = read_all(*train), b = read_all(*val);
  for (int i = 0; i < 750; ++i) REQUIRE(a[i] == static_cast<unsigned char>(text[i]));
  for (int i = 0; i < 250; ++i) REQUIRE(b[i] == static_cast<unsigned char>(text[750 + i]));
}

TEST_CASE("prepare_byte_shards writes train.bin and val.bin that read back as the text") {
  TempDir tmp;
  std::string text;
  for (int i = 0; i < 1234; ++i) text += "First Citizen:\n\xc3\xa9"[i % 17];
  write_bytes(tmp / "in.txt", text);
  const auto out = tmp / "nested/out";
  PrepareRequest req;
  req.texts = {tmp / "in.txt"};
  req.out_dir = out;
  const auto summary = prepare_byte_shards(req);
  CHECK(summary == "wrote " + out +
                       "/train.bin (1110 tokens) and val.bin (124 tokens), and their document "
                       "indexes (train.idx, val.idx)");
  const auto all = open_dataset(shards(out + "/train.bin", out + "/val.bin"), Split::train, 256, 0);
  const auto val = open_dataset(shards(out + "/train.bin", out + "/val.bin"), Split::val, 256, 0);
  auto got = read_all(*all);
  const auto tail = read_all(*val);
  got.insert(got.end(), tail.begin(), tail.end());
  REQUIRE(got.size() == text.size());
  for (size_t i = 0; i < text.size(); ++i) REQUIRE(got[i] == static_cast<unsigned char>(text[i]));
  CHECK(fs::file_size(out + "/val.bin") == 64 + 124);  // u8 tokens
  req.texts = {tmp / "none.txt"};
  expect_data_error([&] { prepare_byte_shards(req); }, {tmp / "none.txt"});

  // Several files and a directory (its files sorted, hidden ones skipped): one stream with the
  // end-of-text byte between documents, split at val_fraction of the tokens.
  fs::create_directories(tmp / "docs/sub");
  write_bytes(tmp / "docs/b.txt", "bb");
  write_bytes(tmp / "docs/a.txt", "a");
  write_bytes(tmp / "docs/.hidden", "zzz");
  write_bytes(tmp / "docs/sub/c.txt", "ccc");
  req.texts = {tmp / "in.txt", tmp / "docs"};
  req.out_dir = tmp / "multi";
  req.val_fraction = 0.5;
  CHECK(prepare_byte_shards(req).find("; 4 documents, end-of-text byte 0 between them") !=
        std::string::npos);
  const auto d = shards(tmp / "multi/train.bin", tmp / "multi/val.bin");
  auto stream = read_all(*open_dataset(d, Split::train, 256, 0));
  const auto vtail = read_all(*open_dataset(d, Split::val, 256, 0));
  stream.insert(stream.end(), vtail.begin(), vtail.end());
  std::vector<int32_t> want;
  for (const unsigned char c : text) want.push_back(c);
  for (const char* doc : {"a", "bb", "ccc"}) {
    want.push_back(0);
    for (const char* c = doc; *c; ++c) want.push_back(static_cast<unsigned char>(*c));
  }
  REQUIRE(stream.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(static_cast<int32_t>(stream[i]) == want[i]);
  CHECK(vtail.size() == want.size() - want.size() / 2);
  req.eot = kEotNone;
  req.force = true;
  CHECK(prepare_byte_shards(req).find("nothing between them") != std::string::npos);
  CHECK(read_all(*open_dataset(d, Split::train, 256, 0)).size() +
            read_all(*open_dataset(d, Split::val, 256, 0)).size() ==
        text.size() + 6);
  req.eot = 256;
  CHECK_THROWS_AS(prepare_byte_shards(req), ConfigError);
}

namespace {

// Thrown from PrepareRequest::after_entry: the prepare stops there as if killed.
struct Killed {};

// Inputs of several blocks each (at block_bytes 2048), one with no safe cut for longer than a
// block (cut at a code point instead: where a resumed reader must cut as the first one did).
void write_prepare_inputs(const std::string& dir) {
  fs::create_directories(dir);
  const char* words[] = {"the ", "cat ", "sat\n", "on ", "a ", "mat, ", "é ", "naïve ", "42 "};
  const size_t sizes[] = {2500, 1200, 1500, 3000, 1500};
  for (int f = 0; f < 5; ++f) {
    std::string text;
    for (int i = 0; text.size() < sizes[f]; ++i) text += words[(i * 7 + f * 3 + i / 5) % 9];
    // Letters only, longer than a block: no safe cut, so it is cut where a block ends, inside
    // words the tokenizer merges.
    for (int i = 0; f == 2 && i < 700; ++i) text += i % 3 ? "thecatsat" : "naïvecafé";
    if (f == 2) text += " the end\n";
    write_bytes(dir + "/doc" + std::to_string(f) + ".txt", text);
  }
  write_bytes(dir + "/empty.txt", "");  // an empty document: a separator and nothing else
}

// What a prepare leaves in dir: every file's bytes by name.
std::map<std::string, std::string> dir_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = slurp(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("an interrupted prepare continues from any journal entry to the same shards") {
  TempDir tmp;
  write_prepare_inputs(tmp / "in");
  // Merges inside the letters-only stretch of doc2: where it is cut decides the ids.
  train_tokenizer_on_text(slurp(tmp / "in/doc2.txt"), 300).save(tmp / "tok.json");
  for (const bool bytes : {true, false}) {
    CAPTURE(bytes);
    PrepareRequest req;
    req.texts = {tmp / "in"};
    if (!bytes) req.tokenizer = tmp / "tok.json";
    req.val_fraction = 0.3;  // the split inside doc3
    req.block_bytes = 2048;
    req.threads = 2;
    req.progress = false;
    req.journal_seconds = 0;  // an entry at every input and block boundary
    int entries = 0;
    req.after_entry = [&] { ++entries; };
    req.out_dir = tmp / (bytes ? "bytes_ref" : "tok_ref");
    prepare_shards(req);
    const auto want = dir_files(req.out_dir);
    CHECK(want.count(bytes ? "train.bin" : "manifest.json") == 1);
    REQUIRE(entries > 10);  // blocks inside the inputs, the inputs, and the finished entry
    for (int k = 1; k <= entries; ++k) {
      CAPTURE(k);
      req.out_dir = tmp / ((bytes ? "bytes" : "tok") + std::to_string(k));
      int n = 0;
      req.after_entry = [&] {
        if (++n == k) throw Killed{};
      };
      CHECK_THROWS_AS(prepare_shards(req), Killed);
      REQUIRE(fs::exists(req.out_dir + "/.prepare.json"));
      CHECK(!fs::exists(req.out_dir + "/train.bin"));
      // What a killed prepare wrote after its last entry: cut off when it continues.
      for (const char* name : {"/train.bin.partial", "/val.bin.partial"})
        std::ofstream(req.out_dir + name, std::ios::binary | std::ios::app) << "garbage";
      req.after_entry = nullptr;
      prepare_shards(req);
      CHECK(dir_files(req.out_dir) == want);  // no journal, no partial shards, the same bytes
    }
  }
}

// A prepare of tmp/in into tmp/out in 2 KiB blocks, killed at its `stop_at`th journal entry;
// returns its request, to be run again.
PrepareRequest interrupted_prepare(const TempDir& tmp, int stop_at) {
  PrepareRequest req;
  req.texts = {tmp / "in"};
  req.out_dir = tmp / "out";
  req.block_bytes = 2048;
  req.progress = false;
  req.journal_seconds = 0;
  int n = 0;
  req.after_entry = [&] {
    if (++n == stop_at) throw Killed{};
  };
  CHECK_THROWS_AS(prepare_shards(req), Killed);
  req.after_entry = nullptr;
  return req;
}

TEST_CASE("an interrupted prepare with other arguments is refused, naming each change") {
  TempDir tmp;
  write_prepare_inputs(tmp / "in");
  train_tokenizer_on_text(slurp(tmp / "in/doc1.txt"), 300).save(tmp / "tok.json");
  PrepareRequest req = interrupted_prepare(tmp, 6);
  const auto refused = [&](PrepareRequest r, const std::string& why) {
    CAPTURE(why);
    CHECK_THROWS_WITH_AS(prepare_shards(r), doctest::Contains(why.c_str()), ConfigError);
    CHECK_THROWS_WITH_AS(prepare_shards(r), doctest::Contains("pass --force to start over"),
                         ConfigError);
  };
  PrepareRequest other = req;
  other.val_fraction = 0.2;
  refused(other, "--val-fraction was 0.1, now 0.2");
  other = req;
  other.eot = kEotNone;
  refused(other, "the end-of-text id (--eot) was 0, now none");
  other = req;
  other.tokenizer = tmp / "tok.json";
  refused(other, "it was byte-level, now --tokenizer");
  other = req;
  other.texts = {tmp / "in/doc0.txt", tmp / "in/doc1.txt"};
  refused(other, "/in/doc2.txt is no longer an input");
  write_bytes(tmp / "in/doc9.txt", "new");
  refused(req, "/in/doc9.txt is a new input");
  fs::remove(tmp / "in/doc9.txt");
  // The journal's own inputs: changed ones are named, whether read already or not.
  std::ofstream(tmp / "in/doc0.txt", std::ios::binary | std::ios::app) << "!";
  refused(req, "/in/doc0.txt changed size (");
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (tmp / "in/doc4.txt").c_str(), times, 0) == 0);
  refused(req, "/in/doc4.txt was modified (its mtime changed)");
  // Partial shards without their journal are not this prepare's to continue or replace.
  fs::copy(tmp / "out/.prepare.json", tmp / "journal");
  fs::remove(tmp / "out/.prepare.json");
  CHECK_THROWS_WITH_AS(prepare_shards(req), doctest::Contains("train.bin.partial exists"),
                       ConfigError);
  fs::copy(tmp / "journal", tmp / "out/.prepare.json");
  // A prepare writing into the directory (its lock): another is refused, --force or not, and
  // removes nothing.
  {
    const int fd = ::open((tmp / "out").c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    for (const bool force : {false, true}) {
      PrepareRequest r = req;
      r.force = force;
      CHECK_THROWS_WITH_AS(prepare_shards(r), doctest::Contains("is writing into"), ConfigError);
    }
    ::close(fd);
  }
  CHECK(fs::exists(tmp / "out/.prepare.json"));
  CHECK(fs::exists(tmp / "out/train.bin.partial"));
  // --force starts over: the same shards as a prepare that was never interrupted.
  req.force = true;
  prepare_shards(req);
  req.force = false;
  req.out_dir = tmp / "ref";
  prepare_shards(req);
  CHECK(dir_files(tmp / "out") == dir_files(tmp / "ref"));
}

TEST_CASE("a partial shard shorter than its journal is refused with the fix") {
  TempDir tmp;
  write_prepare_inputs(tmp / "in");
  PrepareRequest req = interrupted_prepare(tmp, 4);
  fs::resize_file(tmp / "out/train.bin.partial", 100);
  CHECK_THROWS_WITH_AS(prepare_shards(req),
                       doctest::Contains("fewer than the 5750 tokens the journal records; pass "
                                         "--force to start over"),
                       DataError);
  fs::remove(tmp / "out/train.bin.partial");
  CHECK_THROWS_WITH_AS(prepare_shards(req), doctest::Contains("cannot continue"), DataError);
}

TEST_CASE("Markov source: deterministic per seed, entropy rate exact and below log(vocab)") {
  DataConfig d;
  d.synthetic = "markov";
  d.synthetic_tokens = 100000;
  const auto a = read_all(*open_dataset(d, Split::train, 256, 7));
  const auto a2 = read_all(*open_dataset(d, Split::train, 256, 7));
  const auto b = read_all(*open_dataset(d, Split::train, 256, 8));
  CHECK(a.size() == 90000);
  CHECK(a == a2);
  CHECK(a != b);
  const auto val = open_dataset(d, Split::val, 256, 7);
  CHECK(val->num_tokens() == 10000);
  const double h = val->entropy_rate();
  CHECK(h > 0.3);
  CHECK(h < 0.5 * std::log(256.0));
  CHECK(open_dataset(d, Split::train, 256, 7)->entropy_rate() == h);
  CHECK(val->describe().find("entropy rate") != std::string::npos);
  // A vocabulary over 256 still uses byte symbols.
  const auto wide = read_all(*open_dataset(d, Split::train, 50257, 7));
  CHECK(*std::max_element(wide.begin(), wide.end()) < 256);
}

TEST_CASE("Markov entropy rate matches the empirical conditional entropy of its stream") {
  struct Case {
    int vocab, order;
  };
  for (const Case c : {Case{64, 1}, Case{256, 1}, Case{24, 2}}) {
    CAPTURE(c.vocab);
    CAPTURE(c.order);
    DataConfig d;
    d.synthetic = "markov";
    d.markov_order = c.order;
    d.synthetic_tokens = 600000;
    d.val_fraction = 0.1;
    const auto ds = open_dataset(d, Split::train, c.vocab, 123);
    const auto s = read_all(*ds);
    CHECK(*std::max_element(s.begin(), s.end()) < c.vocab);
    const double exact = ds->entropy_rate();
    const double emp = empirical_conditional_entropy(s, c.vocab, c.order);
    CHECK(exact > 0);
    CHECK(exact < std::log(static_cast<double>(c.vocab)));
    CHECK(std::fabs(emp - exact) / exact < 0.01);
    // The order-2 stream really needs two symbols of context.
    if (c.order == 2) CHECK(empirical_conditional_entropy(s, c.vocab, 1) > exact * 1.1);
  }
}

TEST_CASE("MarkovChain: stationary distribution sums to one and matches visit frequencies") {
  const MarkovChain chain(16, 1, 5);
  const auto& pi = chain.stationary();
  REQUIRE(pi.size() == 16);
  double sum = 0;
  for (double p : pi) sum += p;
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
  const auto s = chain.generate(400000, 9);
  std::vector<double> freq(16);
  for (auto v : s) freq[v] += 1.0 / static_cast<double>(s.size());
  for (int i = 0; i < 16; ++i) CHECK(freq[i] == doctest::Approx(pi[i]).epsilon(0.05));
  CHECK(chain.generate(1000, 9) == std::vector<uint8_t>(s.begin(), s.begin() + 1000));
}

namespace {

// Tokens equal to their position (u32 shard), so a window reveals where it starts.
struct PositionData {
  TempDir tmp;
  std::shared_ptr<const TokenDataset> ds;
  explicit PositionData(int n) {
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) toks[i] = i;
    write_token_shard(tmp / "pos.bin", toks, 70000);
    ds = open_dataset(shards(tmp / "pos.bin"), Split::train, 70000, 0);
  }
};

std::pair<std::vector<int32_t>, std::vector<int32_t>> fetch(const DataLoader& l, int64_t first,
                                                            int count, int T) {
  std::vector<int32_t> x(static_cast<size_t>(count) * T), y(x.size());
  l.fetch(first, count, x.data(), y.data());
  return {x, y};
}

}  // namespace

TEST_CASE("loader: windows are contiguous, targets are inputs shifted by one") {
  const int N = 5000, T = 32;
  PositionData data(N);
  const auto stream = windows(data.ds, 42, T);
  DataLoader loader(*stream);
  const auto [x, y] = fetch(loader, 0, 64, T);
  std::set<int32_t> starts;
  for (int i = 0; i < 64; ++i) {
    const int32_t start = x[i * T];
    CHECK(start >= 0);
    CHECK(start + T < N);  // the last target is still inside the data
    for (int t = 0; t < T; ++t) {
      REQUIRE(x[i * T + t] == start + t);
      REQUIRE(y[i * T + t] == start + t + 1);
    }
    starts.insert(start);
  }
  CHECK(starts.size() > 60);  // positions are spread, not repeated
}

TEST_CASE("loader: deterministic, seed-dependent, and split-invariant") {
  const int T = 16;
  PositionData data(3000);
  const auto s1 = windows(data.ds, 1, T), s2 = windows(data.ds, 2, T);
  DataLoader a(*s1), a2(*s1), b(*s2);
  const auto whole = fetch(a, 0, 8, T);
  CHECK(whole == fetch(a2, 0, 8, T));
  CHECK(whole.first != fetch(b, 0, 8, T).first);
  const auto lo = fetch(a, 0, 4, T), hi = fetch(a, 4, 4, T);
  auto joined = lo.first;
  joined.insert(joined.end(), hi.first.begin(), hi.first.end());
  CHECK(joined == whole.first);
  // Sample 5 alone equals row 5 of the batch: the order does not depend on how it is split.
  const auto one = fetch(a, 5, 1, T);
  CHECK(std::equal(one.second.begin(), one.second.end(), whole.second.begin() + 5 * T));
}

TEST_CASE("loader: prefetch/next returns what fetch returns") {
  const int T = 8;
  PositionData data(1000);
  const auto stream = windows(data.ds, 3, T);
  DataLoader loader(*stream);
  std::vector<int32_t> x(6 * T), y(6 * T);
  CHECK_THROWS_AS(loader.next(x.data(), y.data()), std::logic_error);
  for (int64_t step = 0; step < 20; ++step) {
    loader.prefetch(step * 6, 6);
    const double waited = loader.next(x.data(), y.data());
    CHECK(waited >= 0);
    const auto want = fetch(loader, step * 6, 6, T);
    REQUIRE(x == want.first);
    REQUIRE(y == want.second);
  }
  // A request nobody took is superseded by the next one.
  loader.prefetch(100, 6);
  loader.prefetch(200, 6);
  loader.next(x.data(), y.data());
  CHECK(x == fetch(loader, 200, 6, T).first);
  // Destroying a loader with a request in flight joins cleanly.
  DataLoader other(*stream);
  other.prefetch(0, 100);
}

namespace {

struct FailingData final : TokenDataset {
  int64_t num_tokens() const override { return 100; }
  void read(int64_t, int64_t, int32_t*) const override { throw DataError("disk on fire"); }
  std::string describe() const override { return "failing"; }
  double entropy_rate() const override { return std::nan(""); }
};

}  // namespace

TEST_CASE("loader: an error in the worker is rethrown by next()") {
  const auto stream = windows(std::make_shared<FailingData>(), 0, 4);
  DataLoader loader(*stream);
  std::vector<int32_t> x(8), y(8);
  loader.prefetch(0, 2);
  expect_data_error([&] { loader.next(x.data(), y.data()); }, {"disk on fire"});
  // The loader stays usable for the next request.
  loader.prefetch(2, 2);
  CHECK_THROWS_AS(loader.next(x.data(), y.data()), DataError);
}

TEST_CASE("a shard written for a vocabulary that fits is not scanned at open; reads still check") {
  TempDir tmp;
  // Written for 512 (u16), with an id of 300 at position 1234; the header then claims 256, as a
  // corrupted or hand-made file might: the open trusts the header, the read of that window not.
  std::vector<int32_t> toks = ramp(3000, 256);
  toks[1234] = 300;
  write_token_shard(tmp / "lie.bin", toks, 512);
  std::string b = slurp(tmp / "lie.bin");
  const uint32_t claimed = 256;
  std::memcpy(b.data() + 24, &claimed, 4);
  write_bytes(tmp / "lie.bin", b);
  const auto ds = open_dataset(shards(tmp / "lie.bin"), Split::train, 256, 0);
  std::vector<int32_t> w(100);
  CHECK_NOTHROW(ds->read(0, 100, w.data()));
  expect_data_error([&] { ds->read(1200, 100, w.data()); },
                    {tmp / "lie.bin", "token 300 at position 1234 >= model.vocab_size 256"});
  // Written for a larger vocabulary than the model's: scanned at open, as before.
  write_token_shard(tmp / "big.bin", toks, 512);
  expect_data_error([&] { open_dataset(shards(tmp / "big.bin"), Split::train, 256, 0); },
                    {"token 300 at position 1234", "largest token 300"});
}
