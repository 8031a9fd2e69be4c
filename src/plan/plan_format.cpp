// plan_text / plan_json: the plan for people (an aligned table) and for scripts (JSON, written
// with fmt: the plan is a fixed, flat shape, not worth a JSON library).
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "trainrun/metrics.h"
#include "trainrun/plan.h"

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

// Rates in decimal units, as vendors state them.
std::string human_rate(double r) {
  if (r >= 1e12) return fmt::format("{:.2f} TB/s", r / 1e12);
  if (r >= 1e9) return fmt::format("{:.2f} GB/s", r / 1e9);
  return fmt::format("{:.1f} MB/s", r / 1e6);
}

std::string human_seconds(double s) {
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
  line("batch", fmt::format("{} ranks x {} micro x {} accum", p.world, p.micro_batch, p.accum));
  s += "memory per rank:\n";
  line("parameters", human_bytes(p.bytes_params));
  line("gradients", human_bytes(p.bytes_grads));
  line("AdamW moments", fmt::format("{} ({} with ZeRO-1)", human_bytes(p.bytes_optimizer),
                                    human_bytes(p.bytes_optimizer_zero1)));
  line("activations", fmt::format("{} per micro-batch", human_bytes(p.bytes_activations)));
  line("workspace", human_bytes(p.bytes_workspace));
  line("total", fmt::format("{} of {} available{}", human_bytes(p.bytes_total),
                            human_bytes(p.peak.memory), p.fits ? "" : "  DOES NOT FIT"));
  s += "communication per step:\n";
  line("bytes per rank", human_bytes(p.comm_bytes_per_step));
  s += "prediction:\n";
  line("step time",
       fmt::format("{} (compute at peak: a floor)", human_seconds(p.predicted_step_seconds)));
  line("tokens/s", human_count(p.predicted_tokens_per_second));
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
  return fmt::format(
      "{{\"world\":{},\"micro_batch\":{},\"accum\":{},\"params\":{},\"params_by_module\":{{{}}},"
      "\"flops_per_token\":{},\"flops_per_step\":{},"
      "\"bytes\":{{\"params\":{},\"grads\":{},\"optimizer\":{},\"optimizer_zero1\":{},"
      "\"activations\":{},\"workspace\":{},\"total\":{}}},"
      "\"comm_bytes_per_step\":{},\"predicted_step_seconds\":{},"
      "\"predicted_tokens_per_second\":{},"
      "\"device\":{{\"name\":{},\"flops\":{},\"mem_bw\":{},\"memory\":{},\"link_bw\":{},"
      "\"source\":{}}},"
      "\"warnings\":[{}],\"fits\":{}}}",
      p.world, p.micro_batch, p.accum, p.params, modules, json_number(p.flops_per_token),
      json_number(p.flops_per_step), json_number(p.bytes_params), json_number(p.bytes_grads),
      json_number(p.bytes_optimizer), json_number(p.bytes_optimizer_zero1),
      json_number(p.bytes_activations), json_number(p.bytes_workspace), json_number(p.bytes_total),
      json_number(p.comm_bytes_per_step), json_number(p.predicted_step_seconds),
      json_number(p.predicted_tokens_per_second), json_string(p.peak.name),
      json_number(p.peak.flops), json_number(p.peak.mem_bw), json_number(p.peak.memory),
      json_number(p.peak.link_bw), json_string(p.peak.source), warnings, p.fits ? "true" : "false");
}

}  // namespace trainrun
