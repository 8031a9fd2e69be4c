// UTF-8 decoding and the code point classes of the GPT-2 split (table: unicode_classes.inc).
#include "unicode_classes.h"

#include "trainrun/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace trainrun {

namespace {

struct ClassRange {
  uint32_t lo, hi;
  CharClass cls;
};

constexpr CharClass kLetter = CharClass::kLetter;
constexpr CharClass kNumber = CharClass::kNumber;
constexpr CharClass kSpace = CharClass::kSpace;

constexpr ClassRange kRanges[] = {
#include "unicode_classes.inc"
};

// ASCII, the common case, without a search.
constexpr std::array<CharClass, 128> ascii_classes() {
  std::array<CharClass, 128> t{};
  for (const ClassRange& r : kRanges)
    for (uint32_t c = r.lo; c <= r.hi && c < 128; ++c) t[c] = r.cls;
  return t;
}
constexpr std::array<CharClass, 128> kAscii = ascii_classes();

bool is_cont(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 128) return kAscii[cp];
  const auto* it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                                    [](uint32_t c, const ClassRange& r) { return c < r.lo; });
  if (it == std::begin(kRanges)) return CharClass::kOther;
  --it;
  return cp <= it->hi ? it->cls : CharClass::kOther;
}

Utf8Unit utf8_unit(const unsigned char* p, const unsigned char* end) {
  const unsigned char b0 = p[0];
  const Utf8Unit bad{b0, 1, false};
  if (b0 < 0x80) return {b0, 1, true};
  const std::ptrdiff_t avail = end - p;
  // Well-formed sequences (Unicode table 3-7): the second byte's range depends on the first.
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail < 2 || !is_cont(p[1])) return bad;
    return {(b0 & 0x1Fu) << 6 | (p[1] & 0x3Fu), 2, true};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (avail < 3 || p[1] < lo || p[1] > hi || !is_cont(p[2])) return bad;
    return {(b0 & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu), 3, true};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (avail < 4 || p[1] < lo || p[1] > hi || !is_cont(p[2]) || !is_cont(p[3])) return bad;
    return {(b0 & 0x07u) << 18 | (p[1] & 0x3Fu) << 12 | (p[2] & 0x3Fu) << 6 | (p[3] & 0x3Fu), 4,
            true};
  }
  return bad;
}

std::string printable_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  while (p < end) {
    const Utf8Unit u = utf8_unit(p, end);
    // Control characters but newline and tab (ESC starts a terminal's escape sequences, which a
    // model's or a file's bytes must not send to the user's terminal; C1 controls likewise).
    const bool control = (u.cp < 0x20 && u.cp != '\n' && u.cp != '\t') || u.cp == 0x7F ||
                         (u.cp >= 0x80 && u.cp < 0xA0);
    if (u.valid && !control)
      out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(u.len));
    else
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    p += u.len;
  }
  return out;
}

}  // namespace trainrun
