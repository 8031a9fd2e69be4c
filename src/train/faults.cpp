#include "faults.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "trainrun/core/errors.h"

namespace trainrun {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}
}  // namespace

Faults Faults::from_env(int rank, int restart_count) {
  Faults f;
  f.rank_ = rank;
  const char* env = std::getenv("TRAINRUN_FAULTS");
  if (!env || !*env) return f;
  for (const std::string& spec : split(env, ',')) {
    auto parts = split(spec, ':');
    Fault x;
    x.kind = parts.at(0);
    if (x.kind != "kill" && x.kind != "exit" && x.kind != "stall" && x.kind != "freeze" &&
        x.kind != "slow" && x.kind != "nan" && x.kind != "inf")
      throw ConfigError(
          fmt::format("TRAINRUN_FAULTS: unknown fault '{}' in '{}' (kill, exit, "
                      "stall, freeze, slow, nan, inf)",
                      x.kind, spec));
    for (size_t i = 1; i < parts.size(); ++i) {
      auto eq = parts[i].find('=');
      if (eq == std::string::npos)
        throw ConfigError(
            fmt::format("TRAINRUN_FAULTS: '{}' in '{}' is not key=value", parts[i], spec));
      const std::string k = parts[i].substr(0, eq), v = parts[i].substr(eq + 1);
      try {
        if (k == "rank")
          x.rank = std::stoi(v);
        else if (k == "step")
          x.step = std::stoll(v);
        else if (k == "from")
          x.from = std::stoll(v);
        else if (k == "ms")
          x.ms = std::stoi(v);
        else if (k == "code")
          x.code = std::stoi(v);
        else if (k == "attempts" && v == "all")
          x.every_attempt = true;
        else if (k == "attempt")
          x.attempt = std::stoi(v);
        else
          throw std::invalid_argument(k);
      } catch (const std::exception&) {
        throw ConfigError(fmt::format("TRAINRUN_FAULTS: bad '{}' in '{}'", parts[i], spec));
      }
    }
    if (x.rank >= 0 && x.rank != rank) continue;
    if (!x.every_attempt && restart_count != x.attempt) continue;
    f.faults_.push_back(x);
  }
  return f;
}

std::string Faults::describe() const {
  std::string s;
  for (const auto& f : faults_)
    s += fmt::format("{}{}(step {}, from {}, {} ms)", s.empty() ? "" : ", ", f.kind, f.step, f.from,
                     f.ms);
  return s;
}

void Faults::at_step_start(int64_t step) const {
  for (const auto& f : faults_) {
    if (f.kind == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(f.ms));
    if (f.step != step) continue;
    if (f.kind == "kill") {
      spdlog::warn("TRAINRUN_FAULTS: rank {} kills itself at step {}", rank_, step);
      spdlog::default_logger()->flush();
      raise(SIGKILL);
    } else if (f.kind == "exit") {
      spdlog::warn("TRAINRUN_FAULTS: rank {} exits with {} at step {}", rank_, f.code, step);
      spdlog::default_logger()->flush();
      std::_Exit(f.code);
    } else if (f.kind == "stall") {
      spdlog::warn("TRAINRUN_FAULTS: rank {} stalls forever at step {}", rank_, step);
      spdlog::default_logger()->flush();
      for (;;) pause();
    } else if (f.kind == "freeze") {
      spdlog::warn("TRAINRUN_FAULTS: rank {} freezes (SIGSTOP) at step {}", rank_, step);
      spdlog::default_logger()->flush();
      raise(SIGSTOP);
    }
  }
}

bool Faults::poison(int64_t step) const {
  for (const auto& f : faults_)
    if (f.kind == "nan" && (f.step == step || (f.from >= 0 && step >= f.from))) return true;
  return false;
}

bool Faults::diverge(int64_t step) {
  if (diverged_) return false;
  for (const auto& f : faults_)
    if (f.kind == "inf" && f.step == step) {
      spdlog::warn("TRAINRUN_FAULTS: rank {} sets every weight to +inf after step {}", rank_, step);
      diverged_ = true;
      return true;
    }
  return false;
}

}  // namespace trainrun
