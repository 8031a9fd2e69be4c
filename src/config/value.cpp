#include "value.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <fmt/format.h>

#include "suggest.h"
#include "trainrun/core/errors.h"

namespace trainrun::config {
namespace {

template <class T>
T& access(Member<T> m, const Experiment& exp) {
  // Members are only read through this path; the table stores one accessor for both uses.
  return m(const_cast<Experiment&>(exp));
}

bool quoted(const YAML::Node& n) {
  return n.Tag() == "!";
}

std::optional<int64_t> parse_int(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_uint(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<bool> parse_bool(std::string_view s) {
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "true" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "no" || l == "off") return false;
  return std::nullopt;
}

// YAML's spellings of the non-finite numbers (.nan, .inf, -.Inf, ...) and C's (nan, inf): no
// key takes one, and a message must call them that, not strings.
bool non_finite(std::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (!s.empty() && s[0] == '.') s.remove_prefix(1);
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l == "nan" || l == "inf" || l == "infinity";
}

// A number written past what a double holds (1e400, 1e-400): from_chars reads it to the end but
// cannot store it.
bool beyond_double(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc::result_out_of_range && p == s.data() + s.size();
}

bool is_digits(std::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A string that YAML would read as something else (or nothing) must be quoted.
bool needs_quotes(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return true;
  return parse_double(s) || parse_bool(s) || s.front() == ' ' || s.back() == ' ';
}

[[noreturn]] void wrong_type(const std::string& where, const std::string& path,
                             const std::string& expected, const YAML::Node& n,
                             const std::string& hint = "") {
  throw ConfigError(
      fmt::format("{}: {}: expected {}, found {}{}", where, path, expected, describe(n), hint));
}

std::string range_text(const Field& f, double lo, double hi) {
  // A bound from the C++ type (int) when the schema gives none.
  Field g = f;
  if (!g.min || *g.min < lo) g.min = lo, g.min_open = false;
  if (!g.max || *g.max > hi) g.max = hi, g.max_open = false;
  g.list_len = -1;
  return must_be(g.allowed_text());
}

// The message for a value outside an enum key's allowed words.
std::string not_allowed(const Field& f, const std::string& v) {
  std::string hint;
  if (auto s = suggest_word(v, f.allowed)) hint = fmt::format(" (did you mean '{}'?)", *s);
  return fmt::format("{}='{}' is not allowed: must be one of {}{}", f.key, v, f.allowed_text(),
                     hint);
}

template <class T>
T decode_scalar(const Field& f, const YAML::Node& n, const std::string& where,
                const std::string& path);

// One data.mix entry: a mapping with path and weight (name and val optional).
MixSource decode_source(const Field& f, const YAML::Node& n, const std::string& where,
                        const std::string& path) {
  if (!n.IsMap()) wrong_type(where, path, "a mapping such as {path: data/web, weight: 0.7}", n);
  static const std::vector<std::string_view> kKeys = {"path", "weight", "name", "val"};
  MixSource s;
  bool has_path = false;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar())
      wrong_type(where, path, "a key (path, weight, name or val)", kv.first);
    const std::string key = kv.first.Scalar();
    const std::string at = fmt::format("{}.{}", path, key);
    if (key == "path") {
      s.path = decode_scalar<std::string>(f, kv.second, where, at);
      has_path = true;
    } else if (key == "weight") {
      Field weight = f;  // check_sources' rule, for the message of a value that is no number
      weight.min = 0;
      weight.min_open = true;
      s.weight = decode_scalar<double>(weight, kv.second, where, at);
    } else if (key == "name") {
      s.name = decode_scalar<std::string>(f, kv.second, where, at);
    } else if (key == "val") {
      s.val = decode_scalar<std::string>(f, kv.second, where, at);
    } else {
      std::string hint;
      if (auto w = suggest_word(key, kKeys)) hint = fmt::format(" (did you mean '{}'?)", *w);
      throw ConfigError(
          fmt::format("{}: {}: unknown key '{}'{}: a source has path, weight, "
                      "name and val",
                      where, path, key, hint));
    }
  }
  if (!has_path)
    throw ConfigError(
        fmt::format("{}: {}: no path: give each source its shards, e.g. "
                    "{{path: data/web, weight: 0.7}}",
                    where, path));
  return s;
}

// Scalars of one element type: where they come from in YAML and how they print.
template <class T>
T decode_scalar(const Field& f, const YAML::Node& n, const std::string& where,
                const std::string& path) {
  if constexpr (std::is_same_v<T, MixSource>) {
    return decode_source(f, n, where, path);
  } else if constexpr (NamedEnum<T>) {
    // Read as the word it is written as, then looked up: the same messages as a string key.
    const auto word = decode_scalar<std::string>(f, n, where, path);
    if (auto v = enum_from_name<T>(word)) return *v;
    throw ConfigError(fmt::format("{}: {}", where, not_allowed(f, word)));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (n.IsNull()) return "";
    if (!n.IsScalar()) wrong_type(where, path, "a string", n);
    return n.Scalar();
  } else if constexpr (std::is_same_v<T, bool>) {
    std::optional<bool> v;
    if (n.IsScalar() && !quoted(n)) v = parse_bool(n.Scalar());
    if (!v) wrong_type(where, path, "a boolean (true or false)", n);
    return *v;
  } else if constexpr (std::is_same_v<T, double>) {
    std::optional<double> v;
    if (n.IsScalar() && !quoted(n)) v = parse_double(n.Scalar());
    if (!v) {
      Field each = f;  // the rule for one value, also of a list
      each.list_len = -1;
      const std::string rule = each.allowed_text();
      wrong_type(where, path, rule.empty() ? "a number" : "a number (" + must_be(rule) + ")", n);
    }
    return *v;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    std::optional<uint64_t> v;
    if (n.IsScalar() && !quoted(n)) v = parse_uint(n.Scalar());
    if (!v) {
      if (n.IsScalar() && !quoted(n) && is_digits(n.Scalar()) && n.Scalar()[0] != '-') {
        throw ConfigError(fmt::format("{}: {}={} is out of range: must be <= {}", where, path,
                                      n.Scalar(), std::numeric_limits<uint64_t>::max()));
      }
      wrong_type(where, path, "a non-negative integer", n);
    }
    return *v;
  } else {
    std::optional<int64_t> v;
    if (n.IsScalar() && !quoted(n)) v = parse_int(n.Scalar());
    if (!v || *v < std::numeric_limits<T>::min() || *v > std::numeric_limits<T>::max()) {
      if (n.IsScalar() && !quoted(n) && is_digits(n.Scalar())) {
        throw ConfigError(
            fmt::format("{}: {}={} is out of range: {}", where, path, n.Scalar(),
                        range_text(f, static_cast<double>(std::numeric_limits<T>::min()),
                                   static_cast<double>(std::numeric_limits<T>::max()))));
      }
      wrong_type(where, path, "an integer", n);
    }
    return static_cast<T>(*v);
  }
}

template <class T>
const char* element_name() {
  if constexpr (std::is_same_v<T, std::string>) return "strings";
  if constexpr (std::is_same_v<T, double>) return "numbers";
  if constexpr (std::is_same_v<T, MixSource>) return "sources ({path, weight})";
  return "integers";
}

template <class T>
void decode_into(const Field& f, T& out, const YAML::Node& n, const YAML::Mark& mark,
                 const Source& src) {
  const std::string path(f.key);
  const std::string where = src.at(mark);
  if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
    using E = typename T::value_type;
    if (n.IsNull()) {
      out.clear();
      return;
    }
    if (!n.IsSequence()) {
      std::string hint;
      if (n.IsScalar()) hint = fmt::format(" (write a list: [{}])", n.Scalar());
      wrong_type(where, path, fmt::format("a list of {}", element_name<E>()), n, hint);
    }
    T values;
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node& e = n[i];
      const auto at = e.IsNull() ? where : src.at(e.Mark());
      values.push_back(decode_scalar<E>(f, e, at, fmt::format("{}[{}]", path, i)));
    }
    out = std::move(values);
  } else {
    out = decode_scalar<T>(f, n, where, path);
  }
}

template <class T>
std::string render_one(const T& v, bool quote_strings) {
  if constexpr (std::is_same_v<T, MixSource>) {
    std::string out =
        fmt::format("{{path: {}, weight: {}", render_one(v.path, true), format_double(v.weight));
    if (!v.name.empty()) out += fmt::format(", name: {}", render_one(v.name, true));
    if (!v.val.empty()) out += fmt::format(", val: {}", render_one(v.val, true));
    return out + "}";
  } else if constexpr (NamedEnum<T>) {
    return render_one(std::string(enum_name(v)), quote_strings);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return quote_strings && needs_quotes(v) ? fmt::format("\"{}\"", v) : v;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    return format_double(v);
  } else {
    return std::to_string(v);
  }
}

template <class T>
void emit_one(const T& v, YAML::Emitter& out) {
  if constexpr (std::is_same_v<T, MixSource>) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value;
    emit_one(v.path, out);
    out << YAML::Key << "weight" << YAML::Value;
    emit_one(v.weight, out);
    if (!v.name.empty()) {
      out << YAML::Key << "name" << YAML::Value;
      emit_one(v.name, out);
    }
    if (!v.val.empty()) {
      out << YAML::Key << "val" << YAML::Value;
      emit_one(v.val, out);
    }
    out << YAML::EndMap;
  } else if constexpr (NamedEnum<T>) {
    emit_one(std::string(enum_name(v)), out);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (needs_quotes(v)) out << YAML::DoubleQuoted;
    out << v;
  } else if constexpr (std::is_same_v<T, bool>) {
    out << v;
  } else {
    out << render_one(v, false);
  }
}

bool in_range(const Field& f, double v) {
  if (f.min && (v < *f.min || (f.min_open && v == *f.min))) return false;
  if (f.max && (v > *f.max || (f.max_open && v == *f.max))) return false;
  return true;
}

bool safe_file_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// data.mix: each source has shards and a positive weight, and names tell sources apart.
std::optional<std::string> check_sources(const Field& f, const std::vector<MixSource>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].path.empty())
      return fmt::format("{}[{}].path is empty: give the source's token shards", f.key, i);
    if (!(v[i].weight > 0) || !std::isfinite(v[i].weight))
      return fmt::format(
          "{}[{}].weight={} is out of range: must be > 0 (a source not to read "
          "is left out of the list)",
          f.key, i, format_double(v[i].weight));
    for (size_t j = 0; j < i; ++j)
      if (!v[i].name.empty() && v[i].name == v[j].name)
        return fmt::format("{}[{}] and [{}] are both named '{}': give each source its own name",
                           f.key, j, i, v[i].name);
  }
  return std::nullopt;
}

}  // namespace

std::string format_double(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing (an empty value)";
  if (n.IsSequence()) return fmt::format("a list of {}", n.size());
  if (n.IsMap()) return "a mapping";
  const std::string& s = n.Scalar();
  if (quoted(n)) return fmt::format("string \"{}\"", s);
  if (non_finite(s)) return fmt::format("{} (not a finite number)", s);
  if (beyond_double(s)) return fmt::format("number {} (beyond the range of a double)", s);
  if (parse_int(s) || is_digits(s)) return fmt::format("integer {}", s);
  if (parse_double(s)) return fmt::format("number {}", s);
  if (parse_bool(s)) return fmt::format("boolean {}", s);
  return fmt::format("string '{}'", s);
}

std::string Source::at(const YAML::Mark& m) const {
  if (!arg.empty()) return arg;
  if (m.is_null()) return file;
  return fmt::format("{}:{}:{}", file, m.line + 1, m.column + 1);
}

std::string must_be(const std::string& allowed) {
  if (!allowed.empty() && (allowed[0] == '[' || allowed[0] == '(')) return "must be in " + allowed;
  return "must be " + allowed;
}

void decode(const Field& f, const YAML::Node& node, const YAML::Mark& mark, const Source& src,
            Experiment& exp) {
  std::visit([&](auto m) { decode_into(f, m(exp), node, mark, src); }, f.ref);
  if (auto problem = check_value(f, exp)) {
    throw ConfigError(fmt::format("{}: {}", src.at(mark), *problem));
  }
}

std::string render(const Field& f, const Experiment& exp, bool quote_strings) {
  return std::visit(
      [&](auto m) -> std::string {
        const auto& v = access(m, exp);
        using T = std::decay_t<decltype(v)>;
        if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            out += render_one(v[i], true);
          }
          return out + "]";
        } else {
          return render_one(v, quote_strings);
        }
      },
      f.ref);
}

void emit(const Field& f, const Experiment& exp, YAML::Emitter& out) {
  std::visit(
      [&](auto m) {
        const auto& v = access(m, exp);
        using T = std::decay_t<decltype(v)>;
        if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
          out << YAML::Flow << YAML::BeginSeq;
          for (const auto& e : v) emit_one(e, out);
          out << YAML::EndSeq;
        } else {
          emit_one(v, out);
        }
      },
      f.ref);
}

std::optional<std::string> check_value(const Field& f, const Experiment& exp) {
  return std::visit(
      [&](auto m) -> std::optional<std::string> {
        const auto& v = access(m, exp);
        using T = std::decay_t<decltype(v)>;
        if constexpr (NamedEnum<T>) {
          return std::nullopt;  // an enum holds one of its names by construction
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (f.is_enum()) {
            for (auto a : f.allowed) {
              if (a == v) return std::nullopt;
            }
            return not_allowed(f, v);
          }
          if (f.file_name && !safe_file_name(v)) {
            return fmt::format(
                "{}='{}' is not a safe file name: use only letters, digits, '.', "
                "'_' and '-'",
                f.key, v);
          }
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, bool>) {
          return std::nullopt;
        } else if constexpr (requires { typename T::value_type; }) {
          using E = typename T::value_type;
          if (f.list_len >= 0 && static_cast<int>(v.size()) != f.list_len) {
            return fmt::format("{} has {} value{}: expected exactly {}", f.key, v.size(),
                               v.size() == 1 ? "" : "s", f.list_len);
          }
          if constexpr (std::is_same_v<E, MixSource>) {
            return check_sources(f, v);
          } else if constexpr (!std::is_same_v<E, std::string>) {
            for (size_t i = 0; i < v.size(); ++i) {
              if (!in_range(f, static_cast<double>(v[i]))) {
                Field each = f;
                each.list_len = -1;
                return fmt::format("{}[{}]={} is out of range: {}", f.key, i,
                                   render_one(v[i], false), must_be(each.allowed_text()));
              }
            }
          }
          return std::nullopt;
        } else {
          if (!in_range(f, static_cast<double>(v))) {
            return fmt::format("{}={} is out of range: {}", f.key, render_one(v, false),
                               must_be(f.allowed_text()));
          }
          return std::nullopt;
        }
      },
      f.ref);
}

}  // namespace trainrun::config
