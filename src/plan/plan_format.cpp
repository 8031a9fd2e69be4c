// plan_text / plan_json: the plan for people (an aligned table) and for scripts (JSON, written
// with fmt: the plan is a fixed, flat shape, not worth a JSON library).
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "trainrun/obs/metrics.h"
#include "trainrun/plan/plan.h"

namespace trainrun {

namespace {

std::string human_bytes(double b) {
  if (b >= 1073741824.0) return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (b >= 1048576.0) return fmt::format("{:.1f} MiB", b / 1048576.0);
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::string human_count(double n) {
  if (n >= 1e12) return fmt::format("{:.2f} T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f} G", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f} K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

// Rates in decimal units, as vendors state them. A rate given as --disk-bw or --link-bw may be
// as small as the user likes: below 0.1 MB/s in significant digits, not as "0.0 MB/s".
std::string human_rate(double r) {
  if (r >= 1e12) return fmt::format("{:.2f} TB/s", r / 1e12);
  if (r >= 1e9) return fmt::format("{:.2f} GB/s", r / 1e9);
  if (r < 1e5) return fmt::format("{:.3g} MB/s", r / 1e6);
  return fmt::format("{:.1f} MB/s", r / 1e6);
}

// Times past a million seconds (from such rates) in significant digits, not hundreds of them.
std::string human_seconds(double s) {
  if (s >= 1e6) return fmt::format("{:.3g} s ({:.3g} days)", s, s / 86400);
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string json_string(const std::string& s) {
  return json_quote(s);
}

// JSON has no NaN or infinity.
std::string json_number(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : "null";
}

// "ring over 10 GbE: 2.1 ms bandwidth + 0.3 ms latency (1 bucket)".
std::string collective_text(const CollectiveTime& t, int buckets) {
  return fmt::format("{} over {}: {} bandwidth + {} latency ({} bucket{})", t.algorithm, t.link,
                     human_seconds(t.bandwidth_seconds), human_seconds(t.latency_seconds), buckets,
                     buckets == 1 ? "" : "s");
}

std::string collective_json(const CollectiveTime& t) {
  return fmt::format(
      "{{\"seconds\":{},\"bandwidth_seconds\":{},\"latency_seconds\":{},\"algorithm\":{},"
      "\"link\":{}}}",
      json_number(t.seconds), json_number(t.bandwidth_seconds), json_number(t.latency_seconds),
      json_string(t.algorithm), json_string(t.link));
}

}  // namespace

std::string plan_text(const Plan& p) {
  std::string s;
  auto line = [&s](const std::string& k, const std::string& v) {
    s += fmt::format("  {:<24} {}\n", k, v);
  };
  s += fmt::format("parameters: {} ({})\n", p.params, human_count(static_cast<double>(p.params)));
  for (const auto& [name, count] : p.params_by_module)
    s += fmt::format("  {:<24} {:>14} {:>6.2f}%\n", name, count,
                     p.params ? 100.0 * count / p.params : 0.0);
  s += "compute:\n";
  line("FLOPs per token", human_count(p.flops_per_token));
  line("FLOPs per step", human_count(p.flops_per_step));
  line("batch",
       fmt::format("{} ranks x {} micro x {} accum", p.world / p.tp, p.micro_batch, p.accum) +
           (p.tp > 1 ? fmt::format(" (each micro-batch split over tp {})", p.tp) : ""));
  if (p.world > 1)
    line("device mesh",
         fmt::format("dp_replicate {} x dp_shard {}{} (ZeRO shards over dp_shard{})",
                     p.dp_replicate, p.dp_shard, p.tp > 1 ? fmt::format(" x tp {}", p.tp) : "",
                     p.tp > 1 ? "; each layer splits over tp" : ""));
  s += fmt::format("memory per rank (ZeRO-{}):\n", p.zero);
  line("parameters", human_bytes(p.bytes_params));
  line("gradients", human_bytes(p.bytes_grads));
  line("AdamW moments", human_bytes(p.bytes_optimizer));
  if (p.bytes_gathered > 0)
    line("units in use",
         fmt::format("{} (gathered weights, gradient buffers)", human_bytes(p.bytes_gathered)));
  line("activations", fmt::format("{} per micro-batch", human_bytes(p.bytes_activations)));
  line("workspace", human_bytes(p.bytes_workspace));
  line("total", fmt::format("{} of {} available{}", human_bytes(p.bytes_total),
                            human_bytes(p.peak.memory), p.fits ? "" : "  DOES NOT FIT"));
  line("total by ZeRO stage",
       fmt::format("0: {} | 1: {} | 2: {} | 3: {}", human_bytes(p.bytes_total_by_zero[0]),
                   human_bytes(p.bytes_total_by_zero[1]), human_bytes(p.bytes_total_by_zero[2]),
                   human_bytes(p.bytes_total_by_zero[3])));
  s += "communication per step:\n";
  line("bytes per rank", human_bytes(p.comm_bytes_per_step));
  line("allreduce time", p.world / p.tp > 1
                             ? fmt::format("{} ({} not hidden by backward)",
                                           human_seconds(p.allreduce_seconds_per_step),
                                           human_seconds(p.allreduce_exposed_seconds_per_step))
                             : "none (1 rank)");
  if (p.world / p.tp > 1) line("model", collective_text(p.collectives, p.buckets));
  if (p.tp > 1) {
    line("tp allreduces",
         fmt::format("{} per micro-batch of {} each (activations) and the loss's of {}, {} "
                     "per step, {} ({} exposed)",
                     p.tp_allreduces_per_micro_batch, human_bytes(p.tp_allreduce_bytes),
                     human_bytes(p.tp_loss_allreduce_bytes), human_bytes(p.tp_bytes_per_step),
                     human_seconds(p.tp_seconds_per_step),
                     human_seconds(p.tp_exposed_seconds_per_step)));
    line("tp model", collective_text(p.tp_collective, 1));
  }
  const Interconnect& n = p.peak.net;
  s += fmt::format(
      "collectives at scale (the same gradients, {} rank{} a node; {} {} and {} per hop "
      "within a node, {} {} and {} between nodes):\n",
      n.ranks_per_node, n.ranks_per_node == 1 ? "" : "s", n.intra_name, human_rate(n.intra_bw),
      human_seconds(n.intra_latency), n.inter_name, human_rate(n.inter_bw),
      human_seconds(n.inter_latency));
  for (const Plan::AtScale& a : p.at_scale)
    line(fmt::format("{} ranks", a.world),
         fmt::format("{} ({} exposed): {}", human_seconds(a.t.seconds), human_seconds(a.exposed),
                     collective_text(a.t, p.buckets)));
  if (!p.kernels.empty()) {
    s += "kernels per step (roofline: GEMMs at 80% of peak, attention 40%, the rest at 80% of "
         "the memory bandwidth, 2 us a launch):\n";
    double total = 0;
    for (const Plan::Kernels& k : p.kernels) total += k.seconds;
    for (size_t i = 0; i < p.kernels.size() && i < 10; ++i) {
      const Plan::Kernels& k = p.kernels[i];
      line(k.op, fmt::format("{:>9} {:5.1f}%  {:>5} launches  {} FLOP  {}B",
                             human_seconds(k.seconds), 100 * k.seconds / total, k.launches,
                             human_count(k.flops), human_count(k.bytes)));
    }
  }
  s += "prediction:\n";
  line("step time",
       fmt::format("{} ({})", human_seconds(p.predicted_step_seconds),
                   p.kernels.empty() ? "compute at peak: a floor" : "kernel roofline"));
  line("tokens/s", human_count(p.predicted_tokens_per_second));
  line("MFU", fmt::format("{:.1f}% of the peak below", 100 * p.predicted_mfu));
  const CheckpointPlan& c = p.checkpoint;
  s += fmt::format(
      "checkpoint ({}, {}):\n",
      c.every > 0 ? fmt::format("every {} step{}", c.every, c.every == 1 ? "" : "s")
                  : "only at the end",
      fmt::format("a folder: {} rank file{} + MANIFEST", p.world, p.world == 1 ? "" : "s"));
  line("state", fmt::format("{} (weights + AdamW m and v, 12 bytes per parameter)",
                            human_bytes(c.state_bytes)));
  line("bytes per rank", fmt::format("{} (the largest share + {} file overhead)",
                                     human_bytes(c.bytes_per_rank), human_bytes(c.file_overhead)));
  line("copy to host",
       fmt::format("{} at {}", human_seconds(c.copy_seconds), human_rate(p.peak.host_bw)));
  line("write",
       fmt::format("{} at {}", human_seconds(c.write_seconds), human_rate(p.peak.disk_bw)));
  line("step loop blocked",
       fmt::format("{} per save ({})", human_seconds(c.blocking_seconds),
                   !c.async ? "sync: snapshot and write"
                   : c.blocking_seconds > c.copy_seconds
                       ? "async, but each save first waits for the last one's write"
                       : "async: the copy; the write runs in the background"));
  if (c.async)
    line("background write",
         fmt::format("{} per save{}", human_seconds(c.background_seconds),
                     c.every > 0 && c.background_seconds >
                                        static_cast<double>(c.every) * p.predicted_step_seconds
                         ? " (longer than the interval: the next save waits for it)"
                         : ""));
  if (c.every > 0)
    line("share of training", fmt::format("{:.2f}% at the predicted step time (5% needs "
                                          "checkpoint.every >= {})",
                                          100 * c.fraction, c.every_for_5pct));
  line("disk", p.peak.disk_source);
  s += fmt::format("device: {}\n  {}\n", p.peak.name, p.peak.source);
  line("peak", fmt::format("{}FLOP/s, memory {}, link {}", human_count(p.peak.flops),
                           human_rate(p.peak.mem_bw), human_rate(p.peak.link_bw)));
  for (const auto& w : p.warnings) s += fmt::format("warning: {}\n", w);
  return s;
}

std::string plan_json(const Plan& p) {
  std::string modules;
  for (const auto& [name, count] : p.params_by_module)
    modules += fmt::format("{}{}:{}", modules.empty() ? "" : ",", json_string(name), count);
  std::string warnings;
  for (const auto& w : p.warnings) {
    if (!warnings.empty()) warnings += ',';
    warnings += json_string(w);
  }
  std::string at_scale;
  for (const Plan::AtScale& a : p.at_scale)
    at_scale += fmt::format("{}{{\"world\":{},\"collectives\":{},\"exposed_seconds\":{}}}",
                            at_scale.empty() ? "" : ",", a.world, collective_json(a.t),
                            json_number(a.exposed));
  const Interconnect& n = p.peak.net;
  const std::string net = fmt::format(
      "{{\"intra_name\":{},\"intra_bw\":{},\"intra_latency\":{},\"inter_name\":{},"
      "\"inter_bw\":{},\"inter_latency\":{},\"ranks_per_node\":{}}}",
      json_string(n.intra_name), json_number(n.intra_bw), json_number(n.intra_latency),
      json_string(n.inter_name), json_number(n.inter_bw), json_number(n.inter_latency),
      n.ranks_per_node);
  const CheckpointPlan& c = p.checkpoint;
  const std::string checkpoint = fmt::format(
      "{{\"every\":{},\"async\":{},\"files\":{},\"state_bytes\":{},"
      "\"file_overhead\":{},\"bytes_per_rank\":{},\"copy_seconds\":{},"
      "\"write_seconds\":{},\"blocking_seconds\":{},"
      "\"background_seconds\":{},\"fraction\":{},\"every_for_5pct\":{}}}",
      c.every, c.async ? "true" : "false", c.files, json_number(c.state_bytes),
      json_number(c.file_overhead), json_number(c.bytes_per_rank), json_number(c.copy_seconds),
      json_number(c.write_seconds), json_number(c.blocking_seconds),
      json_number(c.background_seconds), json_number(c.fraction), c.every_for_5pct);
  std::string kernels;
  for (const Plan::Kernels& k : p.kernels)
    kernels +=
        fmt::format("{}{{\"op\":{},\"launches\":{},\"flops\":{},\"bytes\":{},\"seconds\":{}}}",
                    kernels.empty() ? "" : ",", json_string(k.op), k.launches, json_number(k.flops),
                    json_number(k.bytes), json_number(k.seconds));
  return fmt::format(
      "{{\"world\":{},\"mesh\":{{\"dp_replicate\":{},\"dp_shard\":{},\"tp\":{}}},\"zero\":{},"
      "\"micro_batch\":"
      "{},"
      "\"accum\":{},\"params\":{},\"params_by_module\":{{{}}},"
      "\"flops_per_token\":{},\"flops_per_step\":{},"
      "\"bytes\":{{\"params\":{},\"grads\":{},\"optimizer\":{},\"gathered\":{},"
      "\"activations\":{},\"workspace\":{},\"total\":{},\"total_by_zero\":[{},{},{},{}]}},"
      "\"comm_bytes_per_step\":{},\"allreduce_seconds_per_step\":{},"
      "\"allreduce_exposed_seconds_per_step\":{},\"buckets\":{},\"collectives\":{},"
      "\"tp_collectives\":{{\"per_micro_batch\":{},\"bytes_each\":{},\"loss_bytes\":{},"
      "\"bytes_per_step\":{},"
      "\"seconds_per_step\":{},\"exposed_seconds_per_step\":{},\"each\":{}}},"
      "\"at_scale\":[{}],\"interconnect\":{},\"predicted_step_seconds\":{},"
      "\"predicted_tokens_per_second\":{},\"predicted_mfu\":{},\"kernels\":[{}],"
      "\"checkpoint\":{},"
      "\"device\":{{\"name\":{},\"flops\":{},\"mem_bw\":{},\"memory\":{},\"link_bw\":{},"
      "\"host_bw\":{},\"disk_bw\":{},\"disk_source\":{},\"source\":{}}},"
      "\"warnings\":[{}],\"fits\":{}}}",
      p.world, p.dp_replicate, p.dp_shard, p.tp, p.zero, p.micro_batch, p.accum, p.params, modules,
      json_number(p.flops_per_token), json_number(p.flops_per_step), json_number(p.bytes_params),
      json_number(p.bytes_grads), json_number(p.bytes_optimizer), json_number(p.bytes_gathered),
      json_number(p.bytes_activations), json_number(p.bytes_workspace), json_number(p.bytes_total),
      json_number(p.bytes_total_by_zero[0]), json_number(p.bytes_total_by_zero[1]),
      json_number(p.bytes_total_by_zero[2]), json_number(p.bytes_total_by_zero[3]),
      json_number(p.comm_bytes_per_step), json_number(p.allreduce_seconds_per_step),
      json_number(p.allreduce_exposed_seconds_per_step), p.buckets, collective_json(p.collectives),
      p.tp_allreduces_per_micro_batch, json_number(p.tp_allreduce_bytes),
      json_number(p.tp_loss_allreduce_bytes), json_number(p.tp_bytes_per_step),
      json_number(p.tp_seconds_per_step), json_number(p.tp_exposed_seconds_per_step),
      collective_json(p.tp_collective), at_scale, net, json_number(p.predicted_step_seconds),
      json_number(p.predicted_tokens_per_second), json_number(p.predicted_mfu), kernels, checkpoint,
      json_string(p.peak.name), json_number(p.peak.flops), json_number(p.peak.mem_bw),
      json_number(p.peak.memory), json_number(p.peak.link_bw), json_number(p.peak.host_bw),
      json_number(p.peak.disk_bw), json_string(p.peak.disk_source), json_string(p.peak.source),
      warnings, p.fits ? "true" : "false");
}

}  // namespace trainrun
