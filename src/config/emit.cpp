// Writing the schema back out: the resolved config as YAML, the key reference as markdown and
// as data for the CLI.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "schema.h"
#include "suggest.h"
#include "trainrun/config/config.h"
#include "trainrun/config/schema.h"
#include "trainrun/core/errors.h"
#include "validate.h"
#include "value.h"

namespace trainrun {
namespace {

std::string default_text(const config::Field& f) {
  if (!f.default_note.empty()) return std::string(f.default_note);
  return config::render(f, Experiment{}, true);
}

std::string cell(std::string s) {
  // A '|' would end the markdown cell early.
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string to_yaml(const Experiment& exp) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string_view open;  // the section whose mapping is being written
  for (const auto& f : config::schema()) {
    if (f.section() != open) {
      if (!open.empty()) out << YAML::EndMap;
      open = f.section();
      if (!open.empty()) out << YAML::Key << std::string(open) << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << std::string(f.leaf()) << YAML::Value;
    config::emit(f, exp, out);
  }
  if (!open.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string schema_markdown() {
  std::string md =
      "# Configuration reference\n\n"
      "<!-- Generated from src/config/schema.cpp by schema_markdown(); tests/test_config "
      "checks it is current. Regenerate: TRAINRUN_UPDATE_DOCS=1 build/tests/test_config -->\n\n"
      "Every key an experiment YAML may set. Unknown keys, wrong types and values outside "
      "*allowed* are errors (exit 2). Any key can be overridden on the command line with "
      "`--set KEY=VALUE`, where VALUE is YAML (`--set optimizer.betas=[0.9,0.95]`). On resume "
      "only keys marked *yes* under *resume* may change.\n";
  auto table = [&md](std::string_view title, std::string_view section) {
    md += fmt::format("\n## {}\n\n", title);
    md += "| key | type | default | allowed | resume | description |\n";
    md += "| --- | --- | --- | --- | --- | --- |\n";
    for (const auto& f : config::schema()) {
      if (f.section() != section) continue;
      md += fmt::format("| `{}` | `{}` | `{}` | {} | {} | {} |\n", f.key, f.type_name(),
                        cell(default_text(f)), cell(f.allowed_text()), f.resumable ? "yes" : "no",
                        cell(std::string(f.description)));
    }
  };
  table("top level", "");
  for (auto s : config::sections()) table(s, s);
  md += "\n## Rules across keys\n\nChecked before anything runs:\n\n";
  for (auto rule : config::cross_field_rules()) md += fmt::format("- {}\n", rule);
  return md;
}

std::vector<ConfigKey> config_keys() {
  std::vector<ConfigKey> keys;
  for (const auto& f : config::schema()) {
    keys.push_back({std::string(f.key), f.type_name(), default_text(f), f.allowed_text(),
                    std::string(f.description), f.resumable});
  }
  return keys;
}

std::string config_value(const Experiment& exp, const std::string& key) {
  if (const auto* f = config::find_field(key)) return config::render(*f, exp, true);
  std::string msg = fmt::format("unknown key '{}'", key);
  if (auto s = config::suggest_key(key)) msg += fmt::format(" (did you mean '{}'?)", *s);
  throw ConfigError(msg);
}

}  // namespace trainrun
