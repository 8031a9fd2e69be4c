// Reading a config: the YAML file, then --set overrides in order, then defaults that depend on
// other keys, then every rule. Each value remembers where it came from so that a rule broken
// later still points at the line (or the --set) to fix.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include "schema.h"
#include "suggest.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "validate.h"
#include "value.h"

namespace trainrun {
namespace {

using config::Field;
using config::Source;

using Origins = std::map<std::string, std::string, std::less<>>;  // key -> "file:3:5" or --set

std::string unknown_key(std::string_view key) {
  std::string msg = fmt::format("unknown key '{}'", key);
  if (auto s = config::suggest_key(key)) return msg + fmt::format(" (did you mean '{}'?)", *s);
  // No likely typo: list what the section does hold.
  auto dot = key.find('.');
  auto sec = dot == std::string_view::npos ? std::string_view{} : key.substr(0, dot);
  std::vector<std::string_view> names;
  if (config::is_section(sec)) {
    for (const auto& f : config::schema()) {
      if (f.section() == sec) names.push_back(f.leaf());
    }
    return msg + fmt::format("; {} holds: {}", sec, fmt::join(names, ", "));
  }
  for (const auto& f : config::schema()) {
    if (f.section().empty()) names.push_back(f.key);
  }
  for (auto s : config::sections()) names.push_back(s);
  return msg + fmt::format("; the top level holds: {}", fmt::join(names, ", "));
}

std::string at(const std::string& file, const YAML::Mark& m) {
  return Source{.file = file, .arg = {}}.at(m);
}

// yaml-cpp shares an aliased node instead of copying it, so a small file can stand for a huge
// tree (one anchor repeated, nested: "billion laughs"). Reading it walks every alias, so bound
// what a walk would see, stopping as soon as a bound is passed so the check itself stays cheap.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;  // expanded scalars: far above a real config
constexpr int kMaxConfigDepth = 32;                   // a config is 2 levels deep, lists 3

std::string nested_too_deep(const std::string& where) {
  return fmt::format(
      "{}: nested more than {} levels deep: a config is a mapping of sections holding keys; "
      "check for runaway brackets",
      where, kMaxConfigDepth);
}

// yaml-cpp's parser has a nesting limit of its own (a few hundred levels), and its message for
// it is "bad file": those errors get ours.
bool past_parser_depth(const YAML::Exception& e) {
  return dynamic_cast<const YAML::DeepRecursion*>(&e) != nullptr;
}

// yaml-cpp's words for a line indented with a tab ("illegal map value", "end of map not found")
// do not name the cause; YAML indents with spaces only. The first such line up to the error's.
std::string tab_hint(const std::string& text, const YAML::Mark& m) {
  size_t pos = 0;
  for (int line = 0; line <= m.line && pos < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const size_t indent_end = std::min(text.find_first_not_of(" \t", pos), end);
    if (text.find('\t', pos) < indent_end)
      return fmt::format(" (line {} is indented with a tab: YAML indents with spaces only)",
                         line + 1);
    pos = end + 1;
  }
  return "";
}

void check_expanded_size(const YAML::Node& node, const std::string& where, int depth,
                         size_t& bytes) {
  if (depth > kMaxConfigDepth) throw ConfigError(nested_too_deep(where));
  bytes += node.IsScalar() ? node.Scalar().size() + 1 : 1;
  if (bytes > kMaxConfigBytes) {
    throw ConfigError(
        fmt::format("{}: expands to more than {} MiB (YAML aliases repeated?): a "
                    "config must stay small; write the values out or shorten them",
                    where, kMaxConfigBytes >> 20));
  }
  if (node.IsSequence()) {
    for (const auto& child : node) check_expanded_size(child, where, depth + 1, bytes);
  } else if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      check_expanded_size(it->first, where, depth + 1, bytes);
      check_expanded_size(it->second, where, depth + 1, bytes);
    }
  }
}

void check_expanded_size(const YAML::Node& node, const std::string& where) {
  size_t bytes = 0;
  check_expanded_size(node, where, 0, bytes);
}

class FileReader {
 public:
  FileReader(std::string file, Experiment& exp, Origins& origins)
      : file_(std::move(file)), exp_(exp), origins_(origins) {}

  void read(const YAML::Node& root) {
    if (root.IsNull()) return;  // an empty file: all defaults
    if (!root.IsMap()) {
      throw ConfigError(
          fmt::format("{}: the top level must be a mapping of keys (name: ..., "
                      "model: ...), found {}",
                      at(file_, root.Mark()), config::describe(root)));
    }
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string name = key_name(it->first);
      if (const Field* f = config::find_field(name); f && f->section().empty()) {
        set(*f, it->first, it->second);
      } else if (config::is_section(name)) {
        first_use(name, it->first.Mark());
        read_section(name, it->second);
      } else if (config::find_field(name)) {
        auto dot = name.find('.');
        throw ConfigError(
            fmt::format("{}: '{}' must be nested: write {}: under {}:", at(file_, it->first.Mark()),
                        name, name.substr(dot + 1), name.substr(0, dot)));
      } else {
        throw ConfigError(fmt::format("{}: {}", at(file_, it->first.Mark()), unknown_key(name)));
      }
    }
  }

 private:
  void read_section(const std::string& section, const YAML::Node& node) {
    if (node.IsNull()) return;  // every key commented out
    if (!node.IsMap()) {
      throw ConfigError(fmt::format("{}: {} must be a mapping of {}.* keys, found {}",
                                    at(file_, node.Mark()), section, section,
                                    config::describe(node)));
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string path = section + "." + key_name(it->first);
      const Field* f = config::find_field(path);
      if (!f) {
        throw ConfigError(fmt::format("{}: {}", at(file_, it->first.Mark()), unknown_key(path)));
      }
      set(*f, it->first, it->second);
    }
  }

  std::string key_name(const YAML::Node& key) const {
    if (!key.IsScalar()) {
      throw ConfigError(fmt::format("{}: a key must be a plain name, found {}",
                                    at(file_, key.Mark()), config::describe(key)));
    }
    return key.Scalar();
  }

  // yaml-cpp keeps both copies of a repeated key; the second would silently win.
  void first_use(const std::string& path, const YAML::Mark& m) {
    auto [it, fresh] = seen_.emplace(path, m);
    if (!fresh) {
      throw ConfigError(fmt::format("{}: duplicate key '{}' (first set at line {}, column {})",
                                    at(file_, m), path, it->second.line + 1,
                                    it->second.column + 1));
    }
  }

  void set(const Field& f, const YAML::Node& key, const YAML::Node& value) {
    const std::string path(f.key);
    first_use(path, key.Mark());
    // An empty value's own mark points past it; its key's mark is the line to fix.
    const YAML::Mark mark = value.IsNull() ? key.Mark() : value.Mark();
    config::decode(f, value, mark, Source{.file = file_, .arg = {}}, exp_);
    origins_[path] = at(file_, mark);
  }

  std::string file_;
  Experiment& exp_;
  Origins& origins_;
  std::map<std::string, YAML::Mark> seen_;
};

struct Override {
  std::string arg;  // "--set key=value", as messages name it
  const Field* field;
  YAML::Node value;
};

Override parse_override(const std::string& text) {
  const std::string arg = "--set " + text;
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(fmt::format("{}: expected KEY=VALUE, e.g. --set train.steps=100", arg));
  }
  const std::string key = text.substr(0, eq);
  const Field* f = config::find_field(key);
  if (!f) {
    if (config::is_section(key)) {
      throw ConfigError(
          fmt::format("{}: '{}' is a section: set one key at a time, e.g. "
                      "--set {}.KEY=VALUE",
                      arg, key, key));
    }
    throw ConfigError(fmt::format("{}: {}", arg, unknown_key(key)));
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    if (past_parser_depth(e)) throw ConfigError(nested_too_deep(arg));
    throw ConfigError(
        fmt::format("{}: the value is not valid YAML: {} (at character {} of the value)", arg,
                    e.msg, e.mark.column + 1));
  }
  check_expanded_size(value, arg);
  return {arg, f, value};
}

void apply(const Override& o, Experiment& exp, Origins& origins) {
  config::decode(*o.field, o.value, YAML::Mark::null_mark(), Source{.file = {}, .arg = o.arg}, exp);
  origins[std::string(o.field->key)] = o.arg;
}

// Every rule, each broken one reported where its first key was set (or against the file).
void check(const Experiment& exp, const Origins& origins, const std::string& file) {
  auto found = config::violations(exp, exp.world_size());
  if (found.empty()) return;
  std::string message;
  for (const auto& v : found) {
    std::string where = file;
    for (auto key : v.keys) {
      if (auto it = origins.find(key); it != origins.end()) {
        where = it->second;
        break;
      }
    }
    if (!message.empty()) message += '\n';
    message += where.empty() ? v.message : fmt::format("{}: {}", where, v.message);
  }
  throw ConfigError(message);
}

// The model keys neither the file nor a --set gave, from the model init_from names
// (config.h). Each filled key's origin is that model's config.json, so a rule it breaks (tp
// not dividing its heads) points there.
void fill_model(Experiment& exp, Origins& origins, const ModelSource& model_source) {
  if (!model_source || exp.model.init_from.empty()) return;
  const std::optional<ModelConfig> from = model_source(exp.model.init_from);
  if (!from) return;
  const std::string origin = exp.model.init_from + "/config.json";
  ModelConfig& m = exp.model;
  auto fill = [&](std::string_view key, auto& mine, const auto& theirs) {
    if (origins.contains(key)) return;
    mine = theirs;
    origins[std::string(key)] = origin;
  };
  fill("model.type", m.type, from->type);
  fill("model.vocab_size", m.vocab_size, from->vocab_size);
  fill("model.d_model", m.d_model, from->d_model);
  fill("model.n_layer", m.n_layer, from->n_layer);
  fill("model.n_head", m.n_head, from->n_head);
  fill("model.n_kv_head", m.n_kv_head, from->n_kv_head);
  fill("model.ffn_hidden", m.ffn_hidden, from->ffn_hidden);
  fill("model.rope_theta", m.rope_theta, from->rope_theta);
  fill("model.tie_embeddings", m.tie_embeddings, from->tie_embeddings);
}

}  // namespace

Experiment parse_experiment(const std::string& yaml_text, const std::string& path,
                            const std::vector<std::string>& overrides,
                            const ModelSource& model_source) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(yaml_text);
  } catch (const YAML::Exception& e) {
    if (past_parser_depth(e)) throw ConfigError(nested_too_deep(at(path, e.mark)));
    throw ConfigError(fmt::format("{}: YAML syntax error: {}{}", at(path, e.mark), e.msg,
                                  tab_hint(yaml_text, e.mark)));
  }
  if (documents.size() > 1) {
    // Load() would silently read only the first: a pasted second document must not vanish.
    throw ConfigError(fmt::format("{}: holds {} YAML documents (separated by ---); expected one",
                                  path, documents.size()));
  }
  const YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
  check_expanded_size(root, path);
  Experiment exp;
  exp.source_path = path;
  Origins origins;
  FileReader(path, exp, origins).read(root);
  for (const auto& text : overrides) apply(parse_override(text), exp, origins);
  fill_model(exp, origins, model_source);
  if (exp.run_dir.empty()) exp.run_dir = "runs/" + exp.name;
  check(exp, origins, path);
  return exp;
}

namespace {

// How long a pipe or FIFO may take to deliver the whole config: `trainrun <(gen)` writes at
// once, a FIFO nobody writes to never would.
constexpr int kPipeWaitMs = 10000;

std::string too_big(const std::string& path) {
  return fmt::format("{}: more than {} MiB, which is not a config file; give the YAML config", path,
                     kMaxConfigBytes >> 20);
}

// The config's text, kMaxConfigBytes at most (a config is a few KiB: more is a data file or a
// device given by mistake). A regular file is read whole; a pipe, FIFO or device (process
// substitution, /dev/stdin) is read without blocking forever on one that has no writer, and
// without growing past kMaxConfigBytes on one that never ends (/dev/zero).
std::string read_config_text(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw ConfigError(fmt::format("{}: config file not found", path));
  if (S_ISDIR(st.st_mode))
    throw ConfigError(fmt::format("{}: is a directory, expected a YAML config file", path));
  if (S_ISREG(st.st_mode)) {
    if (static_cast<size_t>(st.st_size) > kMaxConfigBytes) throw ConfigError(too_big(path));
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw ConfigError(
          fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw ConfigError(
        fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
  std::string text;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kPipeWaitMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      ::close(fd);
      throw ConfigError(fmt::format(
          "{}: the config did not arrive within {} s (a FIFO or device nobody writes to, or "
          "a writer that never finishes); give a config file",
          path, kPipeWaitMs / 1000));
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n == 0) break;  // the end of the input
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(
          fmt::format("{}: cannot read the config file: {}", path, std::strerror(err)));
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      throw ConfigError(too_big(path));
    }
  }
  ::close(fd);
  return text;
}

}  // namespace

Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                           const ModelSource& model_source) {
  return parse_experiment(read_config_text(path), path, overrides, model_source);
}

void apply_overrides(Experiment& exp, const std::vector<std::string>& overrides, bool resume) {
  Experiment next = exp;
  Origins origins;
  std::vector<Override> parsed;
  for (const auto& text : overrides) {
    parsed.push_back(parse_override(text));
    apply(parsed.back(), next, origins);
  }
  // On resume a key the checkpoint fixes may be set only to its value. Only the last --set of a
  // key counts, as on a fresh run (the supervisor's restarts repeat a run's --set list, where a
  // later one may override an earlier).
  for (size_t i = 0; resume && i < parsed.size(); ++i) {
    const Override& o = parsed[i];
    const bool overridden =
        std::any_of(parsed.begin() + long(i) + 1, parsed.end(),
                    [&](const Override& later) { return later.field == o.field; });
    if (o.field->resumable || overridden) continue;
    const auto before = config::render(*o.field, exp, true);
    const auto after = config::render(*o.field, next, true);
    if (before != after)
      throw ConfigError(
          fmt::format("{}: cannot change {} on resume (checkpoint has {}, --set "
                      "asks {}): start a new run instead",
                      o.arg, o.field->key, before, after));
  }
  check(next, origins, exp.source_path);
  exp = std::move(next);
}

}  // namespace trainrun
