// Recursive-descent JSON (RFC 8259), with \u escapes and surrogate pairs decoded to UTF-8.
#include "json.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

#include "trainrun/errors.h"

namespace trainrun {

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Json document() {
    Json v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
    throw DataError(fmt::format("{}: not valid JSON at line {}: {}", what_, line, msg));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("expected '{}'", c));
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 256) fail("nested too deeply");
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end of file");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Kind::kObject;
      ++i_;
      if (eat('}')) return v;
      do {
        skip_ws();
        std::string key = string();
        expect(':');
        v.props.emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Json::Kind::kArray;
      ++i_;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::Kind::kString;
      v.str = string();
    } else if (literal("null")) {
    } else if (literal("true")) {
      v.kind = Json::Kind::kBool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Json::Kind::kBool;
    } else {
      v.kind = Json::Kind::kNumber;
      v.number = number();
    }
    return v;
  }

  double number() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '+' || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      ++i_;
    if (i_ == start) fail(fmt::format("unexpected character '{}'", s_[start]));
    const std::string tok(s_.substr(start, i_ - start));
    char* endp = nullptr;
    const double d = std::strtod(tok.c_str(), &endp);
    if (endp != tok.c_str() + tok.size()) fail(fmt::format("bad number '{}'", tok));
    return d;
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        fail("bad hex digit in a \\u escape");
    }
    return v;
  }

  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!literal("\\u")) fail("a high surrogate without its low half");
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail(fmt::format("unknown escape '\\{}'", e));
      }
    }
  }

  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

}  // namespace

const Json* Json::get(std::string_view key) const {
  for (const auto& [k, v] : props)
    if (k == key) return &v;
  return nullptr;
}

Json parse_json(std::string_view text, const std::string& what) {
  return Parser(text, what).document();
}

std::string json_literal(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (u < 0x20)
      out += fmt::format("\\u{:04x}", u);
    else
      out += c;
  }
  return out + "\"";
}

}  // namespace trainrun
