#include "sweep_file.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"

namespace trainrun::sweep {

namespace {

// A YAML value as --set takes it: a scalar as written, anything else in flow style.
std::string as_set_value(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

}  // namespace

void read_sweep_file(const std::string& path, Axes& axes, std::vector<std::string>& sets) {
  const FileRule rule{1u << 20, kExitUsage, "give a sweep file of at most 1 MiB"};
  const std::optional<std::string> text = read_regular_file(path, rule);
  if (!text) throw ConfigError(fmt::format("--sweep-file {}: no such file", path));
  auto where = [&](const YAML::Node& n) {
    return fmt::format("{}:{}:{}", path, n.Mark().line + 1, n.Mark().column + 1);
  };
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}: not YAML: {}", path, e.what()));
  }
  if (!root.IsMap() || !root["sweep"] || !root["sweep"].IsMap())
    throw ConfigError(
        fmt::format("{}: want a mapping `sweep:` with grid, list, random, trials, "
                    "sweep_seed, seeds or set under it",
                    path));
  auto count = [&](const YAML::Node& n, const std::string& key) {
    try {
      const long long v = n.as<long long>();
      if (v < 0) throw YAML::Exception(n.Mark(), "negative");
      return v;
    } catch (const YAML::Exception&) {
      throw ConfigError(fmt::format("{}: sweep.{}: want a whole number >= 0, found {}", where(n),
                                    key, as_set_value(n)));
    }
  };
  auto mapping = [&](const YAML::Node& n, const std::string& key) {
    if (!n.IsMap())
      throw ConfigError(fmt::format("{}: sweep.{}: want a mapping of config keys", where(n), key));
  };
  const YAML::Node sweep = root["sweep"];
  for (const auto& kv : sweep) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "grid") {
      mapping(v, key);
      for (const auto& axis : v) {
        if (!axis.second.IsSequence())
          throw ConfigError(
              fmt::format("{}: sweep.grid.{}: want a list of values, e.g. [1e-3, "
                          "3e-3]",
                          where(axis.second), axis.first.Scalar()));
        GridAxis a{axis.first.Scalar(), {}};
        for (const auto& value : axis.second) a.values.push_back(as_set_value(value));
        axes.listed.push_back(std::move(a));
      }
    } else if (key == "random") {
      mapping(v, key);
      std::vector<std::string> file_random;
      for (const auto& axis : v)
        file_random.push_back(axis.first.Scalar() + "=" + as_set_value(axis.second));
      axes.random.insert(axes.random.begin(), file_random.begin(), file_random.end());
    } else if (key == "set") {
      mapping(v, key);
      std::vector<std::string> file_sets;
      for (const auto& s : v) file_sets.push_back(s.first.Scalar() + "=" + as_set_value(s.second));
      sets.insert(sets.begin(), file_sets.begin(), file_sets.end());
    } else if (key == "list") {
      try {
        axes.list = axes.list || v.as<bool>();
      } catch (const YAML::Exception&) {
        throw ConfigError(fmt::format("{}: sweep.list: want true or false", where(v)));
      }
    } else if (key == "trials") {
      if (axes.trials == 0) axes.trials = static_cast<int>(count(v, key));
    } else if (key == "sweep_seed") {
      if (axes.sweep_seed == 0) axes.sweep_seed = static_cast<uint64_t>(count(v, key));
    } else if (key == "seeds") {
      if (axes.seeds == 0) axes.seeds = static_cast<int>(count(v, key));
    } else {
      throw ConfigError(
          fmt::format("{}: sweep.{}: unknown key; a sweep file has grid, list, "
                      "random, trials, sweep_seed, seeds and set",
                      where(kv.first), key));
    }
  }
}

}  // namespace trainrun::sweep
