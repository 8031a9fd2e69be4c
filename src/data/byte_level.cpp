// The byte <-> code point tables of GPT-2's bytes_to_unicode.
#include "byte_level.h"

#include <array>
#include <cstdint>

#include "unicode_classes.h"

namespace trainrun {

namespace {

struct Alphabet {
  std::array<uint32_t, 256> cp_of{};   // byte -> code point
  std::array<int16_t, 324> byte_of{};  // code point (< 0x144) -> byte, -1 if none
  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      cp_of[b] = self ? static_cast<uint32_t>(b) : next++;
      byte_of[cp_of[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string to_byte_level(std::string_view raw) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(raw.size() * 2);
  for (const char c : raw) {
    const uint32_t cp = a.cp_of[static_cast<unsigned char>(c)];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {  // two UTF-8 bytes: every code point of the alphabet is below U+0800
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

bool from_byte_level(std::string_view text, std::string& out) {
  const Alphabet& a = alphabet();
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const Utf8Unit u = utf8_unit(p, end);
    if (!u.valid || u.cp >= a.byte_of.size() || a.byte_of[u.cp] < 0) return false;
    out += static_cast<char>(a.byte_of[u.cp]);
    p += u.len;
  }
  return true;
}

}  // namespace trainrun
