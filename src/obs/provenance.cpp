#include "trainrun/obs/provenance.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/core/rng.h"

namespace trainrun {

namespace {

std::string path_in(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kProvenanceFile).string();
}

constexpr FileRule kRule{4u << 20, kExitRunDir,
                         "provenance.json is the record trainrun writes in its run directories: "
                         "move this one away"};

}  // namespace

std::optional<Provenance> read_provenance(const std::string& run_dir) {
  const std::string path = path_in(run_dir);
  const std::optional<std::string> text = read_regular_file(path, kRule);
  if (!text) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    Provenance p;
    for (const auto& a : j.at("attempts")) {
      ProvenanceAttempt at;
      at.trainrun_version = a.at("trainrun_version").get<std::string>();
      at.source_commit = a.at("source_commit").get<std::string>();
      at.config_hash = a.at("config_hash").get<std::string>();
      at.command = a.at("command").get<std::vector<std::string>>();
      at.hosts = a.at("hosts").get<std::vector<std::string>>();
      at.started = a.at("started").get<std::string>();
      at.ended = a.value("ended", "");
      if (a.contains("exit_code") && !a["exit_code"].is_null())
        at.exit_code = a["exit_code"].get<int>();
      p.attempts.push_back(std::move(at));
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(kExitRunDir,
                fmt::format("{}: not a provenance record ({}); {}", path, e.what(), kRule.fix));
  }
}

void write_provenance(const std::string& run_dir, const Provenance& p) {
  nlohmann::json attempts = nlohmann::json::array();
  for (const ProvenanceAttempt& a : p.attempts) {
    nlohmann::json j{{"trainrun_version", a.trainrun_version},
                     {"source_commit", a.source_commit},
                     {"config_hash", a.config_hash},
                     {"command", a.command},
                     {"hosts", a.hosts},
                     {"started", a.started},
                     {"ended", a.ended},
                     {"exit_code", nullptr}};
    if (a.exit_code) j["exit_code"] = *a.exit_code;
    attempts.push_back(std::move(j));
  }
  nlohmann::json j{{"attempts", attempts}};
  write_file_durably(path_in(run_dir), j.dump(1) + "\n");
}

std::string config_hash(const std::string& resolved_yaml) {
  return fmt::format("{:016x}", hash_string(resolved_yaml));
}

}  // namespace trainrun
