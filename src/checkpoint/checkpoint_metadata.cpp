#include "checkpoint_metadata.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

namespace trainrun {

std::string metadata_record(const Header& h, const Layout& layout) {
  const TrainState& s = h.state;
  // fmt prints a double in the shortest form that reads back to the same bits.
  std::string out = fmt::format(
      "format_version={}\ntrainrun_version={}\ncreated={}\nstep={}\ntokens_seen={}\n"
      "samples_seen={}\nseed={}\nbad_steps_total={}\nrestarts={}\nlr_scale={}\nworld_size={}\n"
      "flat_size={}\nparam_count={}\nconfig_bytes={}\noptimizer={}\n",
      h.format_version, h.trainrun_version, h.created, s.step, s.tokens_seen, s.samples_seen,
      s.seed, s.bad_steps_total, s.restarts, s.lr_scale, s.world_size, h.flat_size, h.param_count,
      layout.config_bytes, layout.has_optimizer ? 1 : 0);
  for (const ParamEntry& p : layout.params)
    out +=
        fmt::format("param={} offset={} shape=[{}]\n", p.name, p.offset, fmt::join(p.shape, ", "));
  return out;
}

namespace {

template <typename T>
bool parse_number(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// "param=NAME offset=O shape=[a, b]" (names hold no spaces: they are dataset names).
bool parse_param(const std::string& line, ParamEntry* p) {
  const size_t off = line.find(" offset="), shape = line.find(" shape=[");
  if (off == std::string::npos || shape == std::string::npos || shape < off || line.back() != ']')
    return false;
  p->name = line.substr(6, off - 6);
  if (p->name.empty() ||
      !parse_number(std::string_view(line).substr(off + 8, shape - off - 8), &p->offset))
    return false;
  std::string_view dims = std::string_view(line).substr(shape + 8);
  dims.remove_suffix(1);
  p->shape.clear();
  while (!dims.empty()) {
    const size_t comma = dims.find(", ");
    int64_t d = 0;
    if (!parse_number(dims.substr(0, comma), &d)) return false;
    p->shape.push_back(d);
    dims = comma == std::string_view::npos ? std::string_view() : dims.substr(comma + 2);
  }
  return true;
}

}  // namespace

std::string parse_metadata_record(const std::string& text, Header* h, Layout* layout) {
  std::map<std::string, std::string> kv;
  layout->params.clear();
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("param=")) {
      ParamEntry p;
      if (!parse_param(line, &p)) return fmt::format("cannot parse `{}`", line);
      layout->params.push_back(std::move(p));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return fmt::format("cannot parse `{}`", line);
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  TrainState& s = h->state;
  int64_t world = 0, config_bytes = 0, optimizer = 0;
  const std::pair<const char*, int64_t*> ints[] = {{"format_version", &h->format_version},
                                                   {"step", &s.step},
                                                   {"tokens_seen", &s.tokens_seen},
                                                   {"samples_seen", &s.samples_seen},
                                                   {"bad_steps_total", &s.bad_steps_total},
                                                   {"restarts", &s.restarts},
                                                   {"world_size", &world},
                                                   {"flat_size", &h->flat_size},
                                                   {"param_count", &h->param_count},
                                                   {"config_bytes", &config_bytes},
                                                   {"optimizer", &optimizer}};
  for (const auto& [key, out] : ints)
    if (!kv.contains(key) || !parse_number(std::string_view(kv[key]), out))
      return fmt::format("`{}` is missing or not an integer", key);
  if (!kv.contains("seed") || !parse_number(std::string_view(kv["seed"]), &s.seed))
    return "`seed` is missing or not an integer";
  // from_chars for double reads what fmt wrote back to the same bits.
  if (!kv.contains("lr_scale") || !parse_number(std::string_view(kv["lr_scale"]), &s.lr_scale))
    return "`lr_scale` is missing or not a number";
  if (world < 1 || world > std::numeric_limits<int>::max())
    return fmt::format("world_size {} is out of range", world);
  s.world_size = static_cast<int>(world);
  h->trainrun_version = kv["trainrun_version"];
  h->created = kv["created"];
  layout->config_bytes = static_cast<size_t>(std::max<int64_t>(0, config_bytes));
  layout->has_optimizer = optimizer != 0;
  if (static_cast<int64_t>(layout->params.size()) != h->param_count)
    return fmt::format("{} parameters listed, param_count says {}", layout->params.size(),
                       h->param_count);
  return "";
}

std::string first_difference(const std::string& actual, const std::string& stored) {
  std::istringstream a(actual), b(stored);
  std::string la, lb;
  for (;;) {
    const bool more_a = bool(std::getline(a, la)), more_b = bool(std::getline(b, lb));
    if (!more_a && !more_b) return "the texts differ";  // only in a trailing newline
    if (!more_a) la = "(nothing)";
    if (!more_b) lb = "(nothing)";
    if (la != lb || !more_a || !more_b)
      return fmt::format("the file says `{}`, /metadata says `{}`", la, lb);
  }
}

std::string absurd_value(const Header& h) {
  const TrainState& s = h.state;
  const std::pair<const char*, int64_t> counts[] = {{"step", s.step},
                                                    {"tokens_seen", s.tokens_seen},
                                                    {"samples_seen", s.samples_seen},
                                                    {"bad_steps_total", s.bad_steps_total},
                                                    {"restarts", s.restarts}};
  for (const auto& [name, value] : counts)
    if (value < 0) return fmt::format("{} is {}: a count cannot be negative", name, value);
  if (s.world_size < 1) return fmt::format("world_size is {}: at least 1 rank", s.world_size);
  // Rollbacks only ever lower lr_scale from 1 by a factor in (0, 1].
  if (!(s.lr_scale > 0 && s.lr_scale <= 1))
    return fmt::format("lr_scale is {}: a learning-rate scale lies in (0, 1]", s.lr_scale);
  return "";
}

}  // namespace trainrun
