// Tokenizer <-> Hugging Face's tokenizer.json: what trainrun reads, what it refuses, and the
// file it writes (docs/data-format.md).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <unordered_map>

#include "bpe_model.h"
#include "byte_level.h"
#include "json.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/tokenizer.h"
#include "whole_file.h"

namespace trainrun {

namespace {

class Reader {
 public:
  explicit Reader(const std::string& what) : what_(what) {}

  [[noreturn]] void unsupported(const std::string& msg) const {
    throw DataError(fmt::format(
        "{}: {}; trainrun reads byte-level BPE tokenizers (model BPE, ByteLevel pre-tokenizer "
        "with GPT-2's split, no normalizer), as `trainrun data tokenizer train` or tokenizers' "
        "ByteLevelBPETokenizer write them",
        what_, msg));
  }
  [[noreturn]] void bad(const std::string& msg) const {
    throw DataError(fmt::format("{}: {}", what_, msg));
  }
  bool flag(const Json& obj, const char* key, bool dflt) const {
    const Json* v = member(obj, key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_boolean()) bad(fmt::format("'{}' is not true or false", key));
    return v->get<bool>();
  }
  std::string type_of(const Json* v) const {
    const Json* t = v ? member(*v, "type") : nullptr;
    return t && t->is_string() ? t->get<std::string>() : "";
  }
  // Ids are bounded: the vocabulary table is sized by the largest one, so one absurd id in a
  // small file would otherwise allocate gigabytes.
  static constexpr double kMaxIds = 1 << 24;  // 16,777,216: far past any real vocabulary
  int32_t id(const Json& v, const std::string& of) const {
    const double n = v.is_number() ? v.get<double>() : NAN;
    if (n != std::floor(n)) bad(fmt::format("the id of {} is not an integer", of));
    if (n < 0 || n >= kMaxIds)
      bad(fmt::format("the id of {} is {:.0f}, outside [0, {:.0f}): no vocabulary is that large",
                      of, n, kMaxIds));
    return static_cast<int32_t>(n);
  }

  void read_pipeline(const Json& root, BpeModel& m) const {
    if (const Json* n = member(root, "normalizer"); n && !n->is_null())
      unsupported(fmt::format("the normalizer '{}' is not supported", type_of(n)));
    const Json* pre = member(root, "pre_tokenizer");
    if (type_of(pre) != "ByteLevel")
      unsupported(fmt::format("the pre_tokenizer is '{}', not ByteLevel",
                              pre && !pre->is_null() ? type_of(pre) : "null"));
    if (!flag(*pre, "use_regex", true))
      unsupported("the ByteLevel pre_tokenizer has use_regex: false (no GPT-2 split)");
    m.add_prefix_space = flag(*pre, "add_prefix_space", true);
    const Json* dec = member(root, "decoder");
    if (dec && !dec->is_null() && type_of(dec) != "ByteLevel")
      unsupported(fmt::format("the decoder is '{}', not ByteLevel", type_of(dec)));
  }

  void read_model(const Json& model, BpeModel& m) const {
    if (!model.is_object()) bad("no \"model\" object");
    if (const std::string t = type_of(&model); !t.empty() && t != "BPE")
      unsupported(fmt::format("the model is '{}', not BPE", t));
    if (const Json* d = member(model, "dropout"); d && !d->is_null())
      unsupported("BPE dropout is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (const Json* v = member(model, key); v && !v->is_null() && *v != "")
        unsupported(fmt::format("'{}' is not supported", key));
    if (flag(model, "byte_fallback", false)) unsupported("byte_fallback is not supported");
    m.ignore_merges = flag(model, "ignore_merges", false);
    const Json* vocab = member(model, "vocab");
    if (!vocab || !vocab->is_object()) bad("the model has no \"vocab\" object");
    // A vocabulary's ids are dense (0 .. n-1); a few holes are tolerated, a sparse one would make
    // the table far larger than the file.
    const size_t max_ids = 4 * vocab->size() + 1024;
    std::unordered_map<int32_t, const std::string*> owner;
    for (const auto& [text, idv] : vocab->items()) {
      const int32_t i = id(idv, fmt::format("token '{}'", text));
      if (static_cast<size_t>(i) >= max_ids)
        bad(
            fmt::format("the id of token '{}' is {}, but the vocabulary has only {} tokens: ids "
                        "must run from 0 without large gaps",
                        text, i, vocab->size()));
      if (const auto [it, fresh] = owner.emplace(i, &text); !fresh)
        bad(fmt::format("the tokens '{}' and '{}' share the id {}: each id names one token",
                        *it->second, text, i));
      if (static_cast<size_t>(i) >= m.tokens.size()) m.tokens.resize(static_cast<size_t>(i) + 1);
      if (!from_byte_level(text, m.tokens[static_cast<size_t>(i)]))
        unsupported(fmt::format("the token '{}' (id {}) is not byte-level text", text, i));
    }
    std::unordered_map<std::string, int32_t> ids;  // byte-level text -> id
    for (const auto& [text, idv] : vocab->items()) ids.emplace(text, idv.get<int32_t>());
    const Json* merges = member(model, "merges");
    if (!merges || !merges->is_array()) bad("the model has no \"merges\" array");
    for (const Json& mg : *merges) m.merges.push_back(merge(mg, ids));
  }

  // "a b" (the older format) or ["a", "b"].
  std::pair<int32_t, int32_t> merge(const Json& mg,
                                    const std::unordered_map<std::string, int32_t>& ids) const {
    std::string a, b;
    if (mg.is_string()) {
      const std::string& text = mg.get_ref<const std::string&>();
      const size_t sp = text.find(' ');
      if (sp == std::string::npos || text.find(' ', sp + 1) != std::string::npos)
        bad(fmt::format("the merge '{}' is not two tokens separated by one space", text));
      a = text.substr(0, sp);
      b = text.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    } else {
      bad("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
    return {token_id(a, ids), token_id(b, ids)};
  }
  int32_t token_id(const std::string& text,
                   const std::unordered_map<std::string, int32_t>& ids) const {
    const auto it = ids.find(text);
    if (it == ids.end())
      bad(fmt::format("a merge names '{}', which is not in the vocabulary", text));
    return it->second;
  }

  // After read_model: `vocab` is the model's (checked) vocab object.
  void read_added(const Json& root, const Json& vocab, BpeModel& m) const {
    const Json* added = member(root, "added_tokens");
    if (!added || added->is_null()) return;
    if (!added->is_array()) bad("\"added_tokens\" is not an array");
    for (const Json& t : *added) {
      const Json* cv = member(t, "content");
      if (!cv || !cv->is_string() || *cv == "") bad("an added token has no content");
      const std::string& content = cv->get_ref<const std::string&>();
      for (const char* key : {"single_word", "lstrip", "rstrip"})
        if (flag(t, key, false))
          unsupported(fmt::format("the added token '{}' sets {}", content, key));
      const Json* idv = member(t, "id");
      if (!idv) bad(fmt::format("the added token '{}' has no id", content));
      id(*idv, content);  // checked, but tokenizers assigns the id itself:
      m.added.push_back({assigned_id(content, vocab, m.added), content, flag(t, "special", false)});
    }
  }

  // The id tokenizers gives an added token (AddedVocabulary::add_tokens), whatever the file
  // says: a content that is already an added token or a vocabulary entry keeps that id (so "e"
  // added is still the vocabulary's "e"); any other takes the next id after the vocabulary and
  // the added tokens before it, in file order. Files tokenizers wrote say the same ids; a
  // hand-edited one would otherwise give ids tokenizers never produces, and decode(encode(x))
  // would name other tokens.
  static int32_t assigned_id(const std::string& content, const Json& vocab,
                             const std::vector<AddedToken>& before) {
    for (const AddedToken& t : before)
      if (t.content == content) return t.id;
    if (const Json* in_vocab = member(vocab, content)) return in_vocab->get<int32_t>();
    const auto vocab_size = static_cast<int32_t>(vocab.size());
    int32_t next = vocab_size;
    for (const AddedToken& t : before)
      if (t.id >= vocab_size) next = std::max(next, t.id + 1);
    return next;
  }

 private:
  const std::string& what_;
};

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const BpeModel> model) : m_(std::move(model)) {}

Tokenizer Tokenizer::parse(std::string_view text, const std::string& what) {
  const Json root = parse_json(text, what);
  const Reader r(what);
  if (!root.is_object()) r.bad("not a tokenizer.json object");
  auto m = std::make_shared<BpeModel>();
  r.read_pipeline(root, *m);
  const Json* model = member(root, "model");
  if (!model) r.bad("no \"model\"");
  r.read_model(*model, *m);
  r.read_added(root, *member(*model, "vocab"), *m);
  m->index(what);
  return Tokenizer(std::move(m));
}

Tokenizer Tokenizer::load(const std::string& path) {
  return parse(read_whole_file(path), path);
}

std::string Tokenizer::to_json() const {
  const BpeModel& m = *m_;
  std::string out = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out += "  \"added_tokens\": [";
  for (size_t i = 0; i < m.added.size(); ++i)
    out += fmt::format(
        "{}\n    {{\"id\": {}, \"content\": {}, \"single_word\": false, \"lstrip\": false, "
        "\"rstrip\": false, \"normalized\": false, \"special\": {}}}",
        i ? "," : "", m.added[i].id, json_literal(m.added[i].content), m.added[i].special);
  out += m.added.empty() ? "],\n" : "\n  ],\n";
  const std::string byte_level = fmt::format(
      "{{\"type\": \"ByteLevel\", \"add_prefix_space\": {}, \"trim_offsets\": true, "
      "\"use_regex\": true}}",
      m.add_prefix_space);
  out += "  \"normalizer\": null,\n  \"pre_tokenizer\": " + byte_level + ",\n";
  out +=
      "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
      "\"trim_offsets\": false, \"use_regex\": true},\n";
  out +=
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": "
      "true, \"use_regex\": true},\n";
  out += fmt::format(
      "  \"model\": {{\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
      "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
      "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": {},\n"
      "    \"vocab\": {{",
      m.ignore_merges);
  bool first = true;
  for (size_t i = 0; i < m.tokens.size(); ++i) {
    if (m.tokens[i].empty()) continue;
    out += fmt::format("{}\n      {}: {}", first ? "" : ",",
                       json_literal(to_byte_level(m.tokens[i])), i);
    first = false;
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t r = 0; r < m.merges.size(); ++r) {
    const auto [a, b] = m.merges[r];
    out += fmt::format("{}\n      {}", r ? "," : "",
                       json_literal(to_byte_level(m.tokens[static_cast<size_t>(a)]) + " " +
                                    to_byte_level(m.tokens[static_cast<size_t>(b)])));
  }
  out += "\n    ]\n  }\n}\n";
  return out;
}

void Tokenizer::save(const std::string& path) const {
  // A temporary renamed over `path`: a reader never sees half a tokenizer, a link at the
  // temporary's name is not followed, and a full disk is exit 74 (durable_file.h).
  write_file_durably(path, to_json());
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  m_->encode(text, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  m_->encode(text, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  return m_->decode(ids);
}

int Tokenizer::vocab_size() const {
  return m_->vocab_size();
}

std::string ids_text(const Tokenizer* tok, const std::vector<int32_t>& ids) {
  if (tok) return printable_utf8(tok->decode(ids));
  std::string text;
  for (const int32_t id : ids)
    if (id < 256)
      text.push_back(static_cast<char>(id));
    else
      text += fmt::format("<{}>", id);
  return printable_utf8(text);
}

int Tokenizer::end_of_text() const {
  for (const AddedToken& a : m_->added)
    if (a.content == "<|endoftext|>") return a.id;
  return -1;
}

std::vector<int32_t> encode_file(const Tokenizer& tok, const std::string& path) {
  return tok.encode(read_whole_file(path));
}

// Streams the ids, one character at a time: a file that is not ids (/dev/zero, a binary) is
// refused at its first wrong byte instead of being read whole into memory first.
std::string decode_ids_text(const Tokenizer& tok, const std::string& ids_path) {
  std::ifstream file;
  if (!ids_path.empty()) {
    file.open(ids_path, std::ios::binary);
    if (!file)
      throw DataError(
          fmt::format("{}: cannot read it ({}); check the path", ids_path, std::strerror(errno)));
  }
  std::istream& in = ids_path.empty() ? std::cin : file;
  std::vector<int32_t> ids;
  std::string word;
  auto take = [&] {
    if (word.empty()) return;
    const long long v = std::stoll(word);
    if (v > INT32_MAX) throw DataError(fmt::format("'{}' is not a token id (too large)", word));
    ids.push_back(static_cast<int32_t>(v));
    word.clear();
  };
  for (int c = in.get(); c != std::char_traits<char>::eof(); c = in.get()) {
    if (std::isspace(c)) {
      take();
    } else if (std::isdigit(c) && word.size() < 10) {
      word += static_cast<char>(c);
    } else {
      throw DataError(
          fmt::format("'{}' is not a token id: ids are decimal numbers separated by white space",
                      word + (std::isprint(c) ? std::string(1, static_cast<char>(c))
                                              : fmt::format("\\x{:02x}", c))));
    }
  }
  take();
  return tok.decode(ids);
}

int Tokenizer::num_merges() const {
  return static_cast<int>(m_->merges.size());
}

}  // namespace trainrun
