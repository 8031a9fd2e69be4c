// GPT-2's byte-level alphabet (bytes_to_unicode): every byte written as one printable code point,
// so a vocabulary of byte strings can live in tokenizer.json as text. Printable ASCII and
// Latin-1 stand for themselves; the 68 other bytes become U+0100..U+0143 in byte order (space,
// 0x20, is U+0120 'Ġ').
#pragma once

#include <string>
#include <string_view>

namespace trainrun {

// The byte-level text of raw bytes.
std::string to_byte_level(std::string_view raw);

// The raw bytes of byte-level text, into out; false when it holds a character outside the
// alphabet (then out is unspecified).
bool from_byte_level(std::string_view text, std::string& out);

}  // namespace trainrun
