// JSON for tokenizer.json and the shard manifest, through nlohmann::json (Debian's
// nlohmann-json3-dev), the project's one JSON library. Objects are sorted maps, not file order:
// nothing read here depends on key order, and ordered_json's linear key lookup made a GPT-2-size
// vocabulary (50k keys) load in 2.5 s instead of 0.3 s (bench/RESULTS.md, "JSON").
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace trainrun {

using Json = nlohmann::json;

// Parses text; throws DataError naming `what` ("tokenizer.json") and the line of the first error.
Json parse_json(std::string_view text, const std::string& what);

// The member `key` of an object, or nullptr (also when `obj` is not an object).
inline const Json* member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// s as a JSON string literal, quotes included; bytes that are not UTF-8 become U+FFFD.
std::string json_literal(std::string_view s);

}  // namespace trainrun
