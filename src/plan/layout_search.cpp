// The layout search: every combination the config rules accept, planned (layout_search.h).
#include "trainrun/plan/layout_search.h"

#include <fmt/format.h>

#include <algorithm>

#include "trainrun/config/config.h"
#include "trainrun/core/enum_names.h"
#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Micro-batches worth trying: the divisors of a data-parallel rank's share of the batch, up to
// 64 sequences (beyond that a GPU is long saturated and the activations only grow).
constexpr int kMaxMicroBatch = 64;

}  // namespace

LayoutSearch search_layouts(const Experiment& exp, const DevicePeak& peak) {
  LayoutSearch s;
  s.world = std::max(1, exp.world_size());
  s.device = peak.name;
  const bool blocks = exp.model.type != ModelType::mlp;
  std::vector<int> replicas = {1};
  if (exp.distributed.nodes > 1) replicas.push_back(exp.distributed.nodes);
  for (int tp : divisors(std::max(1, exp.distributed.nproc))) {
    if (tp > 1 && !blocks) break;
    for (int zero = 0; zero <= (blocks ? 3 : 1); ++zero)
      for (int r : replicas)
        for (auto ck : {ActivationCheckpointing::none, ActivationCheckpointing::selective,
                        ActivationCheckpointing::full}) {
          if (ck != ActivationCheckpointing::none && !blocks) continue;
          const int dp = s.world / tp;
          if (s.world % tp != 0 || exp.train.batch_size % dp != 0) continue;
          for (int micro : divisors(exp.train.batch_size / dp)) {
            if (micro > kMaxMicroBatch) break;
            Experiment e = exp;
            e.distributed.tp = tp;
            e.distributed.zero = zero;
            e.distributed.dp_replicate = r;
            e.distributed.reduce_dtype = zero >= 2 ? exp.distributed.reduce_dtype : Precision::fp32;
            e.distributed.reshard_after_forward = true;
            e.train.activation_checkpointing = ck;
            e.train.micro_batch_size = micro;
            try {
              validate_for_world(e, s.world);
            } catch (const ConfigError&) {
              continue;  // a layout the run would refuse (tp and the heads, say)
            }
            ++s.tried;
            const Plan p = make_plan(e, peak, /*advise=*/false);
            if (!p.fits) continue;
            Layout l;
            l.tp = tp;
            l.zero = zero;
            l.dp_replicate = r;
            l.micro_batch = micro;
            l.checkpointing = ck;
            l.step_seconds = p.predicted_step_seconds;
            l.tokens_per_second_per_rank = p.predicted_tokens_per_second / s.world;
            l.mfu = p.predicted_mfu;
            l.bytes_per_rank = p.bytes_total;
            l.sets = {fmt::format("distributed.tp={}", tp),
                      fmt::format("distributed.zero={}", zero),
                      fmt::format("distributed.dp_replicate={}", r),
                      fmt::format("train.activation_checkpointing={}", enum_name(ck)),
                      fmt::format("train.micro_batch_size={}", micro)};
            s.fitting.push_back(std::move(l));
          }
        }
  }
  std::stable_sort(s.fitting.begin(), s.fitting.end(), [](const Layout& a, const Layout& b) {
    return a.step_seconds < b.step_seconds;
  });
  return s;
}

namespace {

size_t shown(const LayoutSearch& s, int top) {
  return top > 0 ? std::min(s.fitting.size(), static_cast<size_t>(top)) : s.fitting.size();
}

}  // namespace

std::string layouts_text(const LayoutSearch& s, int top) {
  std::string out = fmt::format(
      "layout search: {} ranks on {}: {} layouts the config rules accept, {} fit; fastest "
      "first\n",
      s.world, s.device, s.tried, s.fitting.size());
  if (s.fitting.empty())
    return out + "  none fits: use more ranks, a shorter model.seq_len or a smaller model\n";
  out += fmt::format("  {:>3} {:>3} {:>4} {:>12} {:>10} {:>5} {:>10} {:>14} {:>6} {:>11}\n", "#",
                     "tp", "zero", "dp_replicate", "checkpoint", "micro", "step", "tokens/s/rank",
                     "MFU", "memory");
  for (size_t i = 0; i < shown(s, top); ++i) {
    const Layout& l = s.fitting[i];
    out += fmt::format(
        "  {:>3} {:>3} {:>4} {:>12} {:>10} {:>5} {:>9.3f}s {:>14.0f} {:>5.1f}% {:>7.2f} GiB\n",
        i + 1, l.tp, l.zero, l.dp_replicate, enum_name(l.checkpointing), l.micro_batch,
        l.step_seconds, l.tokens_per_second_per_rank, 100 * l.mfu, l.bytes_per_rank / 1073741824.0);
  }
  std::string sets;
  for (const std::string& v : s.fitting.front().sets) sets += " --set " + v;
  return out + "the fastest:" + sets + "\n";
}

std::string layouts_json(const LayoutSearch& s, int top) {
  std::string rows;
  for (size_t i = 0; i < shown(s, top); ++i) {
    const Layout& l = s.fitting[i];
    rows += fmt::format(
        "{}{{\"tp\":{},\"zero\":{},\"dp_replicate\":{},\"activation_checkpointing\":\"{}\","
        "\"micro_batch\":{},\"step_seconds\":{},\"tokens_per_second_per_rank\":{},\"mfu\":{},"
        "\"bytes_per_rank\":{}}}",
        i ? "," : "", l.tp, l.zero, l.dp_replicate, enum_name(l.checkpointing), l.micro_batch,
        l.step_seconds, l.tokens_per_second_per_rank, l.mfu, l.bytes_per_rank);
  }
  return fmt::format("{{\"world\":{},\"tried\":{},\"fit\":{},\"layouts\":[{}]}}\n", s.world,
                     s.tried, s.fitting.size(), rows);
}

}  // namespace trainrun
