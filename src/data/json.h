// A small JSON reader and string quoting, for tokenizer.json and the shard manifest (the data
// concept links no JSON library). The reader builds a tree; it throws DataError naming the file
// and the line of the first error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainrun {

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string str;                                  // kString: UTF-8
  std::vector<Json> items;                          // kArray
  std::vector<std::pair<std::string, Json>> props;  // kObject, in file order

  // The member `key` of an object, or nullptr (also when this is not an object).
  const Json* get(std::string_view key) const;
  bool is_null() const { return kind == Kind::kNull; }
};

// Parses text; `what` names it in errors ("tokenizer.json").
Json parse_json(std::string_view text, const std::string& what);

// s as a JSON string literal, quotes included; bytes >= 0x80 pass through (UTF-8).
std::string json_literal(std::string_view s);

}  // namespace trainrun
