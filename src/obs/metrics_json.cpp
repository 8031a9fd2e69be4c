// JSON lines for metrics rows, through nlohmann::json (the project's one JSON library): exact
// numbers (doubles print as the shortest text that parses back to the same value, integral ones
// without a fraction) and a strict flat reader.
#include "trainrun/obs/metrics.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace trainrun {
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json number(double d) {
  if (!std::isfinite(d)) return nullptr;  // JSON has no NaN or infinity
  // Integral values print as integers ("step":20, not 20.0), as far as a double holds them exactly.
  if (d == std::floor(d) && std::fabs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
  return d;
}

}  // namespace

std::string json_quote(std::string_view s) {
  return dump(Json(std::string(s)));
}

std::string format_metrics_line(const std::string& kind, const MetricRow& row) {
  Json j = Json::object();
  j["kind"] = kind;
  for (const auto& [key, value] : row) {
    if (const double* d = std::get_if<double>(&value))
      j[key] = number(*d);
    else
      j[key] = std::get<std::string>(value);
  }
  return dump(j);
}

std::optional<MetricRow> parse_metrics_line(std::string_view line) {
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;  // also a line torn by a crash (discarded)
  MetricRow row;
  row.reserve(j.size());
  for (const auto& [key, v] : j.items()) {
    if (v.is_number())
      row.emplace_back(key, v.get<double>());
    else if (v.is_string())
      row.emplace_back(key, v.get<std::string>());
    else if (v.is_null())
      row.emplace_back(key, std::nan(""));
    else if (v.is_boolean())
      row.emplace_back(key, v.get<bool>() ? 1.0 : 0.0);
    else
      return std::nullopt;  // rows are flat
  }
  return row;
}

}  // namespace trainrun
