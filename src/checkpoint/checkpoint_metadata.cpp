#include "checkpoint_metadata.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
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
