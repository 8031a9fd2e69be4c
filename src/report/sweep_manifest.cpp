#include "trainrun/report/sweep_manifest.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"

namespace trainrun {

PointStatus status_of_exit(int code) {
  if (code == kExitOk) return PointStatus::done;
  if (code == kExitResumeMe || code == kExitInterrupted) return PointStatus::preempted;
  return PointStatus::failed;
}

namespace {

std::string manifest_path(const std::string& dir) {
  return (std::filesystem::path(dir) / kSweepManifestFile).string();
}

constexpr FileRule kManifestRule{16u << 20, kExitRunDir,
                                 "a sweep directory holds the sweep.json `trainrun sweep` wrote"};

PointStatus status_named(const std::string& name, const std::string& path) {
  for (size_t i = 0; i < std::size(EnumNames<PointStatus>::names); ++i)
    if (EnumNames<PointStatus>::names[i] == name) return static_cast<PointStatus>(i);
  throw Error(kExitRunDir, fmt::format("{}: unknown point status \"{}\"", path, name));
}

}  // namespace

bool is_sweep_dir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(manifest_path(dir), ec);
}

SweepManifest read_sweep_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  const std::optional<std::string> text = read_regular_file(path, kManifestRule);
  if (!text) throw Error(kExitRunDir, fmt::format("{}: no sweep manifest there", path));
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    SweepManifest m;
    m.config = j.at("config").get<std::string>();
    m.sets = j.at("sets").get<std::vector<std::string>>();
    m.axes = j.value("axes", "");
    for (const auto& p : j.at("points")) {
      SweepPoint pt;
      pt.name = p.at("name").get<std::string>();
      if (pt.name.empty() || pt.name.find('/') != std::string::npos || pt.name[0] == '.')
        throw Error(kExitRunDir, fmt::format("{}: point name \"{}\" is not a directory name in "
                                             "the sweep directory",
                                             path, pt.name));
      pt.overrides = p.at("overrides").get<std::vector<std::string>>();
      pt.status = status_named(p.at("status").get<std::string>(), path);
      pt.exit_code = p.value("exit_code", -1);
      pt.attempts = p.value("attempts", 0);
      m.points.push_back(std::move(pt));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw Error(kExitRunDir, fmt::format("{}: not a sweep manifest ({}); {}", path, e.what(),
                                         kManifestRule.fix));
  }
}

void write_sweep_manifest(const std::string& dir, const SweepManifest& m) {
  nlohmann::json j;
  j["config"] = m.config;
  j["sets"] = m.sets;
  j["axes"] = m.axes;
  j["points"] = nlohmann::json::array();
  for (const SweepPoint& p : m.points)
    j["points"].push_back({{"name", p.name},
                           {"overrides", p.overrides},
                           {"status", std::string(enum_name(p.status))},
                           {"exit_code", p.exit_code},
                           {"attempts", p.attempts}});
  write_file_durably(manifest_path(dir), j.dump(2) + "\n");
}

}  // namespace trainrun
