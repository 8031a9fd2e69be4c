#include "json.h"

#include <fmt/format.h>

#include <algorithm>

#include "trainrun/core/errors.h"

namespace trainrun {

Json parse_json(std::string_view text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    const size_t at = std::min<size_t>(e.byte, text.size());
    const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + at, '\n'));
    std::string_view why = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    if (const size_t tag = why.find("] "); tag != std::string_view::npos)
      why.remove_prefix(tag + 2);
    throw DataError(fmt::format("{}: not valid JSON at line {}: {}", what, line, why));
  }
}

std::string json_literal(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace trainrun
