#include "sweep_points.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"

namespace trainrun::sweep {

namespace {

using Axis = GridAxis;

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Splits at the commas that are outside brackets, braces, parentheses and quotes, so a YAML
// list or a quoted string with a comma stays one value.
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '[' || c == '{' || c == '(') {
      ++depth;
    } else if ((c == ']' || c == '}' || c == ')') && depth > 0) {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  return out;
}

// KEY=REST, both non-empty.
std::pair<std::string, std::string> key_and_rest(const std::string& arg, const char* flag) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || trim(arg.substr(0, eq)).empty())
    throw ConfigError(fmt::format("sweep {} {}: want KEY=VALUES, e.g. {} optimizer.lr=1e-3,3e-4",
                                  flag, arg, flag));
  return {trim(arg.substr(0, eq)), trim(arg.substr(eq + 1))};
}

Axis grid_axis(const std::string& arg) {
  auto [key, rest] = key_and_rest(arg, "--grid");
  Axis a{key, rest.empty() ? std::vector<std::string>{} : split_top_level(rest)};
  if (a.values.empty())
    throw ConfigError(
        fmt::format("sweep --grid {}: an empty grid; give the values, e.g. "
                    "--grid {}=V1,V2",
                    arg, key));
  for (const std::string& v : a.values)
    if (v.empty())
      throw ConfigError(fmt::format("sweep --grid {}: an empty value between commas", arg));
  return a;
}

// A --random axis: its distribution, drawn from `u` in [0, 1).
struct Draw {
  std::string key, kind;
  double lo = 0, hi = 0;
  std::vector<std::string> choices;
  std::string value(double u) const {
    if (kind == "choice")
      return choices[std::min(choices.size() - 1, static_cast<size_t>(u * choices.size()))];
    const double x =
        kind == "uniform" ? lo + u * (hi - lo) : std::exp(std::log(lo) + u * std::log(hi / lo));
    return fmt::format("{:.6g}", x);
  }
};

double bound(const std::string& text, const std::string& arg) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw ConfigError(fmt::format("sweep --random {}: \"{}\" is not a finite number", arg, text));
  return v;
}

Draw random_axis(const std::string& arg) {
  auto [key, rest] = key_and_rest(arg, "--random");
  const size_t open = rest.find('(');
  if (open == std::string::npos || rest.back() != ')')
    throw ConfigError(fmt::format(
        "sweep --random {}: want KEY=loguniform(A,B), uniform(A,B) or choice(V1,V2,...)", arg));
  Draw d{key, trim(rest.substr(0, open)), 0, 0, {}};
  const std::vector<std::string> args =
      split_top_level(rest.substr(open + 1, rest.size() - open - 2));
  if (d.kind == "choice") {
    d.choices = args;
    if (args.empty() || (args.size() == 1 && args[0].empty()))
      throw ConfigError(fmt::format("sweep --random {}: choice() needs values", arg));
    return d;
  }
  if (d.kind != "uniform" && d.kind != "loguniform")
    throw ConfigError(
        fmt::format("sweep --random {}: unknown distribution \"{}\"; use "
                    "loguniform(A,B), uniform(A,B) or choice(V1,V2,...)",
                    arg, d.kind));
  if (args.size() != 2)
    throw ConfigError(fmt::format("sweep --random {}: {}() takes two bounds, A < B", arg, d.kind));
  d.lo = bound(args[0], arg);
  d.hi = bound(args[1], arg);
  if (!(d.lo < d.hi) || (d.kind == "loguniform" && d.lo <= 0))
    throw ConfigError(fmt::format("sweep --random {}: want A < B{}", arg,
                                  d.kind == "loguniform" ? ", both > 0" : ""));
  return d;
}

// A point's name part for one override: the key's last component (the whole key when two axes
// share that component), '-', the value with every character outside [A-Za-z0-9.+-] as '_'.
std::string name_part(const std::string& key, const std::string& value, bool full_key) {
  std::string out = full_key ? key : key.substr(key.rfind('.') + 1);
  out += '-';
  for (char c : value)
    out +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' ? c : '_';
  return out;
}

}  // namespace

std::vector<Point> expand(const Axes& axes, uint64_t base_seed) {
  std::vector<Axis> grid;
  for (const Axis& a : axes.listed) {
    if (a.values.empty())
      throw ConfigError(fmt::format("sweep grid {}: an empty grid; give the values", a.key));
    grid.push_back(a);
  }
  for (const std::string& g : axes.grid) grid.push_back(grid_axis(g));
  std::vector<Draw> draws;
  for (const std::string& r : axes.random) draws.push_back(random_axis(r));
  if (axes.trials > 0 && draws.empty())
    throw ConfigError("sweep --trials: give --random axes to draw from");
  if (axes.list && grid.empty()) throw ConfigError("sweep --list: give the --grid axes to zip");
  if (grid.empty() && draws.empty() && axes.seeds <= 0)
    throw ConfigError(
        "sweep: nothing to sweep; give --grid KEY=V1,V2, --random "
        "KEY=loguniform(A,B) --trials N, or --seeds N");

  // Combinations of the grid axes: the product, or zipped with --list.
  std::vector<std::vector<std::string>> rows{{}};
  if (axes.list) {
    for (const Axis& a : grid)
      if (a.values.size() != grid.front().values.size())
        throw ConfigError(fmt::format(
            "sweep --list: the axes zip value by value, but {} has {} values and {} has {}",
            grid.front().key, grid.front().values.size(), a.key, a.values.size()));
    rows.clear();
    for (size_t i = 0; i < grid.front().values.size(); ++i) {
      std::vector<std::string> row;
      for (const Axis& a : grid) row.push_back(a.key + "=" + a.values[i]);
      rows.push_back(row);
    }
  } else {
    for (const Axis& a : grid) {
      std::vector<std::vector<std::string>> next;
      for (const auto& row : rows)
        for (const std::string& v : a.values) {
          next.push_back(row);
          next.back().push_back(a.key + "=" + v);
        }
      rows = std::move(next);
    }
  }
  if (!draws.empty()) {
    Rng rng(hash_combine(axes.sweep_seed, 0x5eed));
    std::vector<std::vector<std::string>> trials;
    for (int t = 0; t < std::max(1, axes.trials); ++t) {
      std::vector<std::string> trial;
      for (const Draw& d : draws) trial.push_back(d.key + "=" + d.value(rng.uniform()));
      trials.push_back(trial);
    }
    std::vector<std::vector<std::string>> next;
    for (const auto& row : rows)
      for (const auto& trial : trials) {
        next.push_back(row);
        next.back().insert(next.back().end(), trial.begin(), trial.end());
      }
    rows = std::move(next);
  }
  if (axes.seeds > 0) {
    std::vector<std::vector<std::string>> next;
    for (const auto& row : rows)
      for (int s = 0; s < axes.seeds; ++s) {
        next.push_back(row);
        next.back().push_back(fmt::format("seed={}", base_seed + static_cast<uint64_t>(s)));
      }
    rows = std::move(next);
  }

  // Names: a key's last component, unless two axes end in the same one.
  std::map<std::string, std::set<std::string>> keys_by_last;
  for (const std::string& kv : rows.front()) {
    const std::string key = kv.substr(0, kv.find('='));
    keys_by_last[key.substr(key.rfind('.') + 1)].insert(key);
  }
  std::vector<Point> points;
  std::map<std::string, int> names;
  for (const auto& row : rows) {
    Point p{"", row};
    for (const std::string& kv : row) {
      const size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq);
      if (!p.name.empty()) p.name += '_';
      p.name += name_part(key, kv.substr(eq + 1),
                          keys_by_last[key.substr(key.rfind('.') + 1)].size() > 1);
    }
    if (p.name.size() > 120) p.name.resize(120);
    ++names[p.name];
    points.push_back(std::move(p));
  }
  // Two points whose values differ only in characters the name replaced (or past its first
  // 120): a hash of the whole overrides keeps them apart, the same on every run.
  for (Point& p : points)
    if (names[p.name] > 1) {
      std::string all;
      for (const std::string& kv : p.overrides) all += kv + "\n";
      p.name += fmt::format("-{:08x}", static_cast<uint32_t>(hash_string(all)));
    }
  return points;
}

std::string describe(const Axes& axes) {
  std::string out;
  for (const Axis& a : axes.listed) {
    out += " --grid " + a.key + "=";
    for (size_t i = 0; i < a.values.size(); ++i) out += (i ? "," : "") + a.values[i];
  }
  for (const std::string& g : axes.grid) out += " --grid " + g;
  if (axes.list) out += " --list";
  for (const std::string& r : axes.random) out += " --random " + r;
  if (!axes.random.empty())
    out += fmt::format(" --trials {} --sweep-seed {}", std::max(1, axes.trials), axes.sweep_seed);
  if (axes.seeds > 0) out += fmt::format(" --seeds {}", axes.seeds);
  return out.empty() ? out : out.substr(1);
}

}  // namespace trainrun::sweep
