// JSON lines for metrics rows: exact formatting (round-trip doubles) and a strict flat parser.
#include "metrics_json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace trainrun {
namespace {

void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", unsigned(c));
        else
          out += char(c);
    }
  }
  out += '"';
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

struct Parser {
  std::string_view s;
  size_t i = 0;

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool literal(std::string_view word) {
    if (s.substr(i, word.size()) != word) return false;
    i += word.size();
    return true;
  }
  bool hex4(uint32_t& v) {
    if (i + 4 > s.size()) return false;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + i + 4, v, 16);
    if (ec != std::errc() || p != s.data() + i + 4) return false;
    i += 4;
    return true;
  }
  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (i < s.size()) {
      char c = s[i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) return std::nullopt;
      char e = s[i++];
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
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return std::nullopt;
          if (cp >= 0xD800 && cp < 0xDC00 && literal("\\u")) {
            uint32_t lo = 0;
            if (!hex4(lo) || lo < 0xDC00 || lo >= 0xE000) return std::nullopt;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;
  }
  // Parses a value into `out` (an out-parameter: GCC 12 warns falsely about an
  // optional<variant<double, string>> built from a double).
  bool value(MetricValue& out) {
    ws();
    if (i >= s.size()) return false;
    if (s[i] == '"') {
      auto str = string();
      if (!str) return false;
      out.emplace<std::string>(std::move(*str));
      return true;
    }
    double v = 0;
    if (literal("null"))
      v = std::nan("");
    else if (literal("true"))
      v = 1.0;
    else if (literal("false"))
      v = 0.0;
    else {
      // strtod needs a terminated string; numbers are short, so copy their characters.
      size_t j = i;
      while (j < s.size() && std::string_view("+-0123456789.eE").find(s[j]) != std::string::npos)
        ++j;
      std::string num(s.substr(i, j - i));
      char* end = nullptr;
      v = std::strtod(num.c_str(), &end);
      if (num.empty() || end != num.c_str() + num.size()) return false;
      i = j;
    }
    out.emplace<double>(v);
    return true;
  }
};

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out;
  append_string(out, s);
  return out;
}

std::string format_metrics_line(const std::string& kind, const MetricRow& row) {
  std::string out = "{\"kind\":";
  append_string(out, kind);
  for (const auto& [key, value] : row) {
    out += ',';
    append_string(out, key);
    out += ':';
    if (const double* d = std::get_if<double>(&value)) {
      // fmt's {} is the shortest representation that parses back to the same double.
      if (std::isfinite(*d))
        out += fmt::format("{}", *d);
      else
        out += "null";
    } else {
      append_string(out, std::get<std::string>(value));
    }
  }
  out += '}';
  return out;
}

std::optional<MetricRow> parse_metrics_line(std::string_view line) {
  Parser p{line};
  if (!p.eat('{')) return std::nullopt;
  MetricRow row;
  if (!p.eat('}')) {
    do {
      auto key = p.string();
      if (!key || !p.eat(':')) return std::nullopt;
      MetricValue value;
      if (!p.value(value)) return std::nullopt;
      row.emplace_back(std::move(*key), std::move(value));
    } while (p.eat(','));
    if (!p.eat('}')) return std::nullopt;
  }
  p.ws();
  if (p.i != line.size()) return std::nullopt;
  return row;
}

}  // namespace trainrun
