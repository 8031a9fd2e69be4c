// JSON for tokenizer.json and the shard manifest, through nlohmann::json (Debian's
// nlohmann-json3-dev), the project's one JSON library. Objects keep their file order
// (ordered_json): a tokenizer's vocabulary is read, and written, in the order of its ids.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace trainrun {

using Json = nlohmann::ordered_json;

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
