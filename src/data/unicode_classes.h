// Code points of UTF-8 text and the four classes the GPT-2 pre-tokenizer split distinguishes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainrun {

// \p{L}, \p{N}, \s and everything else, as PyPI's `tokenizers` (Oniguruma) classifies them: the
// table is generated from it (scripts/gen-unicode-classes.py), so code points that Unicode
// assigns after that version count as kOther until the table is regenerated.
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

CharClass char_class(uint32_t cp);

// One unit of UTF-8 text: a well-formed code point, or one byte that does not start one
// (valid = false, cp = the byte). Invalid bytes are kept as they are, one unit each, so every
// byte string splits and round-trips; overlong forms, surrogates and values above U+10FFFF are
// invalid, as in Unicode's definition of well-formed UTF-8.
struct Utf8Unit {
  uint32_t cp;
  int len;
  bool valid;
};

// The unit at p (p < end).
Utf8Unit utf8_unit(const unsigned char* p, const unsigned char* end);

// The class of the unit at p; an invalid byte is kOther.
inline CharClass class_at(const unsigned char* p, const unsigned char* end, int* len) {
  const Utf8Unit u = utf8_unit(p, end);
  *len = u.len;
  return u.valid ? char_class(u.cp) : CharClass::kOther;
}

}  // namespace trainrun
