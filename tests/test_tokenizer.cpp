// Byte-level BPE: UTF-8 units and classes, the GPT-2 split and its safe cuts, the byte-level
// alphabet, JSON and SHA-256, tokenizer.json reading and writing, merge order, training (the
// incremental trainer against a recount-every-merge one), prepare and the manifest checks.
// The cross-check against PyPI's tokenizers is tests/integration/test_tokenizer.py.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../src/data/bpe_model.h"
#include "../src/data/byte_level.h"
#include "../src/data/json.h"
#include "../src/data/pretokenize.h"
#include "../src/data/sha256.h"
#include "../src/data/text_blocks.h"
#include "../src/data/unicode_classes.h"
#include "temp_dir.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/tokenizer.h"

using namespace trainrun;
namespace fs = std::filesystem;
using trainrun::testing::TempDir;

namespace {

std::vector<std::string> pieces(std::string_view s) {
  std::vector<std::string> out;
  for_each_piece(s, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Text with every kind of character the split distinguishes, and bytes that are not UTF-8.
std::string awkward_text(size_t n, uint32_t seed) {
  const std::vector<std::string> pool = {
      "a", "Z", "é",  "ß",      "Ж",    "中",     "٣",        "7", "½",  " ",
      " ", " ", "\n", "\t",     "\r\n", "\u3000", "\u00a0",   "'", "'s", "'ll",
      "!", ".", "😀",  "\u0301", "\xff", "\xc3",   "\xe2\x82", "_"};
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < n) s += pool[rng() % pool.size()];
  return s;
}

std::string corpus() {
  std::string s;
  for (int i = 0; i < 40; ++i)
    s += "the cat sat on the mat; the rat can't see the cat. That's all, 1234 times!\n"
         "  indented   spaces\tand tabs, naïve café, 中文 text 😀😀\n";
  return s;
}

// The textbook trainer: recount every pair of every word before each merge.
std::vector<std::pair<int32_t, int32_t>> naive_merges(std::string_view text, int vocab_size) {
  std::map<std::string, int64_t> counts;
  for (const auto& p : pieces(text)) ++counts[p];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> s;
    for (const unsigned char b : w) s.push_back(b);
    words.emplace_back(s, c);
  }
  std::map<std::string, int32_t> ids;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.emplace_back(1, static_cast<char>(b)), ids[tokens.back()] = b;
  std::vector<std::pair<int32_t, int32_t>> merges;
  while (static_cast<int>(tokens.size()) < vocab_size) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pc;
    for (const auto& [s, c] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pc[{s[i], s[i + 1]}] += c;
    if (pc.empty()) break;
    auto best = pc.begin();
    for (auto it = pc.begin(); it != pc.end(); ++it)
      if (it->second > best->second) best = it;  // ties: the smallest pair (map order)
    const auto [a, b] = best->first;
    const std::string merged = tokens[static_cast<size_t>(a)] + tokens[static_cast<size_t>(b)];
    auto [it, fresh] = ids.emplace(merged, static_cast<int32_t>(tokens.size()));
    if (fresh) tokens.push_back(merged);
    merges.emplace_back(a, b);
    for (auto& [s, c] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(it->second);
          i += 2;
        } else {
          out.push_back(s[i++]);
        }
      }
      s = out;
    }
  }
  return merges;
}

// n tokens "t0", "t1", ...: a vocabulary made large without merges.
std::vector<std::string> numbered(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(std::string(1, 't').append(std::to_string(i)));
  return out;
}

// A tokenizer.json with the 256 bytes and the given extra tokens and merges.
std::string tokenizer_json(const std::vector<std::string>& extra,
                           const std::vector<std::string>& merges, const std::string& added = "",
                           const std::string& normalizer = "null") {
  std::string vocab;
  int id = 0;
  for (int b = 0; b < 256; ++b)
    vocab += json_literal(to_byte_level(std::string(1, static_cast<char>(b)))) + ": " +
             std::to_string(id++) + ",";
  for (const auto& t : extra) vocab += json_literal(t) + ": " + std::to_string(id++) + ",";
  vocab.pop_back();
  std::string m;
  for (const auto& x : merges) {
    if (!m.empty()) m += ',';
    m += json_literal(x);
  }
  return "{\"added_tokens\": [" + added + "], \"normalizer\": " + normalizer +
         ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
         "\"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
         "\"BPE\", \"vocab\": {" +
         vocab + "}, \"merges\": [" + m + "]}}";
}

}  // namespace

TEST_CASE("utf8_unit: well-formed code points, and every other byte alone") {
  auto unit = [](std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    return utf8_unit(p, p + s.size());
  };
  CHECK(unit("A").cp == 'A');
  CHECK(unit("é").cp == 0xE9);
  CHECK(unit("é").len == 2);
  CHECK(unit("中").cp == 0x4E2D);
  CHECK(unit("😀").cp == 0x1F600);
  CHECK(unit("😀").len == 4);
  for (std::string_view bad : {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80",
                               "\xff", "\xf8\x88\x80\x80\x80", "\xc3"}) {
    CAPTURE(bad);
    CHECK_FALSE(unit(bad).valid);
    CHECK(unit(bad).len == 1);
  }
}

TEST_CASE("printable_utf8 keeps well-formed text and replaces every stray byte with U+FFFD") {
  CHECK(printable_utf8("ROMEO: caf\xC3\xA9 \xE2\x82\xAC") == "ROMEO: caf\xC3\xA9 \xE2\x82\xAC");
  // A character cut in two (a sample that stopped inside it), a lone continuation byte, an
  // overlong form: each invalid byte is one replacement.
  CHECK(printable_utf8("ab\xC3") == "ab\xEF\xBF\xBD");
  CHECK(printable_utf8("\x80x") == "\xEF\xBF\xBDx");
  CHECK(printable_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(printable_utf8("\xC2\x41") ==
        "\xEF\xBF\xBD"
        "A");
  CHECK(printable_utf8("") == "");
  // Terminal escape sequences from a model's or a file's bytes never reach the terminal.
  CHECK(printable_utf8("a\x1b[2Jb") == "a\xEF\xBF\xBD[2Jb");
  CHECK(printable_utf8("x\ry\x7f\xC2\x9B") == "x\xEF\xBF\xBDy\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(printable_utf8("line\n\ttab") == "line\n\ttab");
}

TEST_CASE("char_class: tokenizers' \\p{L}, \\p{N} and \\s") {
  CHECK(char_class('a') == CharClass::kLetter);
  CHECK(char_class(0xE9) == CharClass::kLetter);    // é
  CHECK(char_class(0x4E2D) == CharClass::kLetter);  // 中 (Lo)
  CHECK(char_class(0x02B0) == CharClass::kLetter);  // ʰ (Lm)
  CHECK(char_class('7') == CharClass::kNumber);
  CHECK(char_class(0x0663) == CharClass::kNumber);  // Arabic-Indic 3 (Nd)
  CHECK(char_class(0x00BD) == CharClass::kNumber);  // ½ (No)
  CHECK(char_class(0x216B) == CharClass::kNumber);  // Ⅻ (Nl)
  for (uint32_t ws : {0x09u, 0x0Au, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2003u, 0x2028u, 0x3000u})
    CHECK(char_class(ws) == CharClass::kSpace);
  // Not whitespace to Oniguruma, though Python's str.isspace says so; and marks, symbols, emoji.
  for (uint32_t o : {0x1Cu, 0x1Fu, 0x200Bu, 0x0301u, 0x1F600u, 0x5Fu, 0x27u, 0x10FFFFu})
    CHECK(char_class(o) == CharClass::kOther);
}

TEST_CASE("the GPT-2 split, alternative by alternative") {
  using V = std::vector<std::string>;
  CHECK(pieces("Hello world") == V{"Hello", " world"});
  CHECK(pieces("I'm can't they'll we'RE") ==
        V{"I", "'m", " can", "'t", " they", "'ll", " we", "'", "RE"});
  CHECK(pieces("a   b") == V{"a", "  ", " b"});
  CHECK(pieces("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pieces("x  ") == V{"x", "  "});
  CHECK(pieces("   ") == V{"   "});
  CHECK(pieces("123abc") == V{"123", "abc"});
  CHECK(pieces(" 123") == V{" 123"});
  CHECK(pieces("!!! ?") == V{"!!!", " ?"});
  CHECK(pieces("'S") == V{"'", "S"});
  CHECK(pieces("x'''s") == V{"x", "'''", "s"});
  CHECK(pieces("é😀😀 x") == V{"é", "😀😀", " x"});
  CHECK(pieces(" \n x") == V{" \n", " x"});
  CHECK(pieces("a \tb") == V{"a", " ", "\t", "b"});
  CHECK(pieces("ab\xff\xfe cd\xc3") == V{"ab", "\xff\xfe", " cd", "\xc3"});
  CHECK(pieces("").empty());
}

TEST_CASE("next_safe_cut: the text on each side splits as it does inside the whole") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::string text = awkward_text(3000, seed);
    const auto whole = pieces(text);
    for (size_t from = 0; from < text.size(); from += 97) {
      const size_t q = next_safe_cut(text, from);
      if (q == std::string::npos) continue;
      CAPTURE(seed);
      CAPTURE(q);
      REQUIRE(q >= from);
      auto parts = pieces(std::string_view(text).substr(0, q));
      const auto rest = pieces(std::string_view(text).substr(q));
      parts.insert(parts.end(), rest.begin(), rest.end());
      CHECK(parts == whole);
    }
  }
  CHECK(next_safe_cut("a b", 0) == 1);
  CHECK(next_safe_cut("a\u3000 b", 0) == std::string::npos);  // U+3000 is whitespace
  CHECK(next_safe_cut("abc", 0) == std::string::npos);
}

TEST_CASE("TextBlocks: segments cover the file and end at safe cuts") {
  TempDir dir;
  const std::string text = awkward_text(50000, 7);
  write(dir / "t.txt", text);
  TextBlocks blocks(dir / "t.txt", 4096, 1000, 30000);
  std::vector<TextSegment> segs;
  std::string joined;
  std::vector<std::string> split;
  bool cut_seen = false;
  while (blocks.next(segs))
    for (const auto& s : segs) {
      CHECK(s.offset == joined.size());
      cut_seen |= s.offset >= 30000 && s.offset < 30100;
      joined += s.text;
      for (const auto& p : pieces(s.text)) split.push_back(p);
    }
  CHECK(joined == text);
  CHECK(split == pieces(text));
  CHECK(cut_seen);  // a segment starts right at or after the requested cut
}

TEST_CASE("byte-level alphabet: GPT-2's bytes_to_unicode") {
  CHECK(to_byte_level(" ") == "Ġ");
  CHECK(to_byte_level("\n") == "Ċ");
  CHECK(to_byte_level("A!") == "A!");
  CHECK(to_byte_level("\xe9") == "é");  // Latin-1 stands for itself
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string back;
  REQUIRE(from_byte_level(to_byte_level(all), back));
  CHECK(back == all);
  CHECK_FALSE(from_byte_level("\x01", back));  // byte 1 is written U+0101
  CHECK_FALSE(from_byte_level(" ", back));     // space is written Ġ
}

TEST_CASE("json: values, escapes and errors") {
  const Json j = parse_json(
      R"({"a": [1, -2.5e3, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00", "o": {}})",
      "t.json");
  REQUIRE(member(j, "a"));
  CHECK(member(j, "a")->size() == 5);
  CHECK((*member(j, "a"))[1].get<double>() == -2500);
  CHECK((*member(j, "a"))[2].get<bool>());
  CHECK((*member(j, "a"))[4].is_null());
  CHECK(member(j, "s")->get<std::string>() == "x\"\\/\né😀");
  CHECK(member(j, "missing") == nullptr);
  CHECK(member(*member(j, "a"), "x") == nullptr);  // not an object
  CHECK(json_literal("a\"b\\\n\x01") == "\"a\\\"b\\\\\\n\\u0001\"");
  CHECK_THROWS_AS(parse_json("{\"a\": }", "t"), DataError);
  CHECK_THROWS_AS(parse_json("[1, 2", "t"), DataError);
  CHECK_THROWS_AS(parse_json("\"\\ud800\"", "t"), DataError);
  CHECK_THROWS_WITH_AS(parse_json("{\n\n x}", "t.json"),
                       doctest::Contains("t.json: not valid JSON at line 3"), DataError);
  CHECK(json_literal("caf\xc3\xa9 \xff") == "\"café \xef\xbf\xbd\"");  // not UTF-8: U+FFFD
}

TEST_CASE("sha256: FIPS 180-4 test vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("encode merges the lowest rank first, the leftmost of equal ranks") {
  const Tokenizer t = Tokenizer::parse(
      tokenizer_json({"bc", "ab", "abc", "aa"}, {"b c", "a b", "a bc", "a a"}), "t.json");
  const auto id = [&](const std::string& s) { return t.model().id_of.at(s); };
  CHECK(t.encode("abc") == std::vector<int32_t>{id("abc")});  // b+c (rank 0), then a+bc
  CHECK(t.encode("ab") == std::vector<int32_t>{id("ab")});
  CHECK(t.encode("aaa") == std::vector<int32_t>{id("aa"), 'a'});
  CHECK(t.encode(" abc") == std::vector<int32_t>{' ', id("abc")});  // " abc" is one piece
  CHECK(t.decode(t.encode("aaa abc")) == "aaa abc");
  CHECK(t.vocab_size() == 260);
}

TEST_CASE("added tokens are matched before the split, longest first") {
  const std::string added =
      R"({"id": 256, "content": "<|endoftext|>", "special": true},
         {"id": 257, "content": "<|end", "special": true})";
  const Tokenizer t = Tokenizer::parse(tokenizer_json({}, {}, added), "t.json");
  CHECK(t.vocab_size() == 258);
  CHECK(t.encode("a<|endoftext|>b") == std::vector<int32_t>{'a', 256, 'b'});
  CHECK(t.encode("<|end") == std::vector<int32_t>{257});
  CHECK(t.decode({'x', 256}) == "x<|endoftext|>");
  // Written and read back: the same ids.
  const Tokenizer back = Tokenizer::parse(t.to_json(), "back.json");
  CHECK(back.encode("a<|endoftext|>b<|end") == t.encode("a<|endoftext|>b<|end"));
}

// The ids tokenizers 0.23 gives this file (checked against it in tests/integration's
// test_tokenizer.py): an added token that is a vocabulary entry keeps the entry's id, the others
// are numbered after the vocabulary in file order, whatever ids the file wrote.
TEST_CASE("added tokens take the ids tokenizers assigns, not the ones a file claims") {
  const std::string added = R"({"id": 5, "content": "e", "special": false},
      {"id": 300, "content": "<x>", "special": true},
      {"id": 263, "content": "<y>", "special": true},
      {"id": 7, "content": "<z>", "special": true},
      {"id": 258, "content": "ab", "special": false})";
  const Tokenizer t = Tokenizer::parse(tokenizer_json({"ab"}, {"a b"}, added), "t.json");
  const std::string text = "hello<x>abe<y><z>";
  CHECK(t.encode(text) == std::vector<int32_t>{'h', 'e', 'l', 'l', 'o', 257, 256, 'e', 258, 259});
  CHECK(t.decode(t.encode(text)) == text);
  CHECK(t.decode({5, 7}) == "\x05\x07");  // the bytes those ids are, not "e" and "<z>"
  CHECK(t.vocab_size() == 260);
}

TEST_CASE("tokenizer.json that trainrun cannot reproduce is refused with the reason") {
  CHECK_THROWS_WITH_AS(Tokenizer::parse(tokenizer_json({}, {}, "", R"({"type": "NFC"})"), "n.json"),
                       doctest::Contains("normalizer 'NFC'"), DataError);
  CHECK_THROWS_WITH_AS(Tokenizer::parse(tokenizer_json({}, {"x y"}), "m.json"),
                       doctest::Contains("('x' + 'y') makes a token not in"), DataError);
  CHECK_THROWS_WITH_AS(Tokenizer::parse(tokenizer_json({}, {"a b c"}), "m.json"),
                       doctest::Contains("one space"), DataError);
  std::string meta = tokenizer_json({}, {});
  meta.replace(meta.find("\"ByteLevel\", \"add"), 11, "\"Metaspace\"");
  CHECK_THROWS_WITH_AS(Tokenizer::parse(meta, "s.json"), doctest::Contains("'Metaspace'"),
                       DataError);
  CHECK_THROWS_AS(Tokenizer::load("/nonexistent/tokenizer.json"), DataError);
}

TEST_CASE("training: the incremental pair counts give the merges of a full recount") {
  const std::string text = corpus() + awkward_text(4000, 3);
  for (int vocab : {260, 300, 420}) {
    CAPTURE(vocab);
    const Tokenizer t = train_tokenizer_on_text(text, vocab);
    CHECK(t.model().merges == naive_merges(text, vocab));
    CHECK(t.vocab_size() <= vocab);
  }
  const Tokenizer t = train_tokenizer_on_text(text, 400);
  CHECK(t.vocab_size() == 400);
  CHECK(t.encode(text).size() < text.size() / 2);  // it learned something
  CHECK(t.decode(t.encode(text)) == text);
  // Stops when no pair is left rather than inventing tokens.
  CHECK(train_tokenizer_on_text("ab ab", 1000).vocab_size() == 258);
  CHECK_THROWS_AS(train_tokenizer_on_text("x", 100), ConfigError);
}

TEST_CASE("encode/decode round trip on awkward bytes, and through the file") {
  TempDir dir;
  const Tokenizer t = train_tokenizer_on_text(corpus() + awkward_text(20000, 5), 600);
  t.save(dir / "tok.json");
  const Tokenizer back = Tokenizer::load(dir / "tok.json");
  CHECK(back.model().merges == t.model().merges);
  for (uint32_t seed = 10; seed < 15; ++seed) {
    const std::string s = awkward_text(5000, seed) + std::string(3000, ' ') + "\xff\xfe\xfd";
    const auto ids = t.encode(s);
    CHECK(back.encode(s) == ids);
    CHECK(t.decode(ids) == s);
  }
  CHECK_THROWS_AS(t.decode({600}), DataError);
  write(dir / "ids.txt", "104 105\n");
  CHECK(decode_ids_text(t, dir / "ids.txt") == "hi");
  write(dir / "bad.txt", "104 x");
  CHECK_THROWS_AS(decode_ids_text(t, dir / "bad.txt"), DataError);
}

TEST_CASE("prepare: streamed, parallel shards hold the ids of each file encoded whole") {
  TempDir dir;
  const Tokenizer t = train_tokenizer_on_text(corpus(), 320);
  REQUIRE(t.vocab_size() == 320);
  t.save(dir / "tok.json");
  const std::string a = awkward_text(40000, 21) + corpus(), b = corpus() + awkward_text(9000, 22);
  write(dir / "a.txt", a);
  write(dir / "b.txt", b);
  PrepareRequest req;
  req.texts = {dir / "a.txt", dir / "b.txt"};
  req.tokenizer = dir / "tok.json";
  req.out_dir = dir / "out";
  req.val_fraction = 0.2;
  req.threads = 2;
  req.block_bytes = 4096;  // many blocks, carried tails and a cut inside a block
  const std::string summary = prepare_token_shards(req);
  CHECK(summary.find("vocab 320") != std::string::npos);

  DataConfig dc;
  dc.train = dir / "out/train.bin";
  dc.val = dir / "out/val.bin";
  const auto train = open_dataset(dc, Split::train, 320, 1);
  const auto val = open_dataset(dc, Split::val, 320, 1);
  std::vector<int32_t> got(static_cast<size_t>(train->num_tokens() + val->num_tokens()));
  train->read(0, train->num_tokens(), got.data());
  val->read(0, val->num_tokens(), got.data() + train->num_tokens());
  std::vector<int32_t> want = t.encode(a);
  const auto wb = t.encode(b);
  want.insert(want.end(), wb.begin(), wb.end());
  CHECK(got == want);
  // The split sits near 80% of the bytes (inside b.txt, at a piece boundary).
  const double share = static_cast<double>(val->num_tokens()) / static_cast<double>(got.size());
  CHECK(share > 0.1);
  CHECK(share < 0.3);
  // 320 ids need two bytes each.
  CHECK(fs::file_size(dir / "out/train.bin") ==
        64 + 2 * static_cast<uint64_t>(train->num_tokens()));

  const std::string manifest = slurp(dir / "out/manifest.json");
  const Json m = parse_json(manifest, "manifest.json");
  CHECK(m["tokenizer"]["sha256"] == sha256_hex(slurp(dir / "tok.json")));
  CHECK(m["tokenizer"]["vocab_size"] == 320);
  CHECK(m["inputs"].size() == 2);
  CHECK(m["inputs"][1]["tokens"] == wb.size());
  CHECK(slurp(dir / "out/tokenizer.json") == slurp(dir / "tok.json"));

  // The run's tokenizer is found beside its shards, and must be the one the manifest names.
  auto found = data_tokenizer(dc);
  REQUIRE(found);
  CHECK(found->encode("the cat") == t.encode("the cat"));
  DataConfig bytes_only;
  bytes_only.text = dir / "a.txt";
  CHECK(data_tokenizer(bytes_only) == nullptr);
  write(dir / "out/tokenizer.json", slurp(dir / "out/tokenizer.json") + " ");
  CHECK_THROWS_WITH_AS(data_tokenizer(dc), doctest::Contains("sha256"), DataError);
}

TEST_CASE("open_dataset refuses shards whose tokenizer does not fit model.vocab_size") {
  TempDir dir;
  // 401 ids, of which the text uses only bytes: the tokens fit 256, the vocabulary does not.
  write(dir / "tok.json", tokenizer_json(numbered(144), {}, R"({"id": 400, "content": "<|x|>"})"));
  write(dir / "a.txt", corpus());
  PrepareRequest req;
  req.texts = {dir / "a.txt"};
  req.tokenizer = dir / "tok.json";
  req.out_dir = dir / "out";
  prepare_token_shards(req);
  DataConfig dc;
  dc.train = dir / "out/train.bin";
  CHECK(open_dataset(dc, Split::train, 401, 1)->num_tokens() > 0);
  CHECK_THROWS_WITH_AS(open_dataset(dc, Split::train, 256, 1),
                       doctest::Contains("model.vocab_size >= 401 (e.g. --set "
                                         "model.vocab_size=448)"),
                       DataError);
  dc.train = dir / "out";  // a directory of shards: the same check
  CHECK_THROWS_AS(open_dataset(dc, Split::val, 400, 1), DataError);
  // Another tool's manifest.json beside shards is none of trainrun's business.
  write(dir / "out/manifest.json", R"({"format": "webdataset", "tokenizer": {"vocab_size": 9}})");
  CHECK(open_dataset(dc, Split::val, 256, 1)->num_tokens() > 0);
  write(dir / "out/manifest.json", "not json");
  CHECK(open_dataset(dc, Split::val, 256, 1)->num_tokens() > 0);
}

TEST_CASE("data.tokenizer: shards made with another tokenizer are refused; it is the run's") {
  TempDir dir;
  const Tokenizer mine = train_tokenizer_on_text(corpus(), 300);
  const Tokenizer other = train_tokenizer_on_text(corpus() + awkward_text(3000, 5), 300);
  mine.save(dir / "mine.json");
  other.save(dir / "other.json");
  write(dir / "a.txt", corpus());
  PrepareRequest req;
  req.texts = {dir / "a.txt"};
  req.tokenizer = dir / "mine.json";
  req.out_dir = dir / "out";
  prepare_token_shards(req);
  DataConfig dc;
  dc.train = dir / "out/train.bin";
  dc.val = dir / "out/val.bin";
  dc.tokenizer = dir / "mine.json";
  CHECK(open_dataset(dc, Split::val, 300, 1)->num_tokens() > 0);
  CHECK(data_tokenizer(dc)->to_json() == mine.to_json());
  dc.tokenizer = dir / "other.json";
  for (const Split split : {Split::train, Split::val})
    CHECK_THROWS_WITH_AS(open_dataset(dc, split, 300, 1),
                         doctest::Contains("made with another tokenizer than data.tokenizer"),
                         DataError);
  CHECK_THROWS_AS(data_tokenizer(dc), DataError);  // sample would print the wrong text
  dc.tokenizer = dir / "missing.json";
  CHECK_THROWS_WITH_AS(open_dataset(dc, Split::train, 300, 1), doctest::Contains("no such file"),
                       DataError);

  // Shards without a manifest (llm.c's, say): data.tokenizer decodes them and must fit.
  fs::remove(dir / "out/manifest.json");
  dc.tokenizer = dir / "other.json";
  CHECK(open_dataset(dc, Split::train, 300, 1)->num_tokens() > 0);
  CHECK(data_tokenizer(dc)->to_json() == other.to_json());
  CHECK_THROWS_WITH_AS(open_dataset(dc, Split::train, 299, 1),
                       doctest::Contains("data.tokenizer='"), DataError);
}

TEST_CASE("prepare writes 4-byte tokens when the vocabulary passes 65536") {
  TempDir dir;
  write(dir / "tok.json",
        tokenizer_json(numbered(70000 - 256), {}, R"({"id": 70000, "content": "<|x|>"})"));
  write(dir / "a.txt", corpus() + "<|x|>");
  PrepareRequest req;
  req.texts = {dir / "a.txt"};
  req.tokenizer = dir / "tok.json";
  req.out_dir = dir / "out";
  req.val_fraction = 0.5;
  prepare_token_shards(req);
  DataConfig dc;
  dc.train = dir / "out/train.bin";
  dc.val = dir / "out/val.bin";
  const auto val = open_dataset(dc, Split::val, 70001, 1);
  std::vector<int32_t> v(static_cast<size_t>(val->num_tokens()));
  val->read(0, val->num_tokens(), v.data());
  CHECK(v.back() == 70000);
  CHECK(fs::file_size(dir / "out/val.bin") == 64 + 4 * v.size());
}
