// SHA-256 (FIPS 180-4): the tokenizer hash a shard manifest records, the same digest as
// `sha256sum tokenizer.json`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainrun {

// Lowercase hex digest of bytes.
std::string sha256_hex(std::string_view bytes);

}  // namespace trainrun
