// The GPT-2 split (see pretokenize.h): each alternative of the regex in order, by hand.
#include "pretokenize.h"

#include <string>

#include "unicode_classes.h"

namespace trainrun {

namespace {

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// 's 't 'm 'd (2 bytes) or 're 've 'll (3 bytes) at i, else 0. Case-sensitive, as in GPT-2.
size_t contraction(std::string_view s, size_t i) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  const char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// End of the run of characters of class cls that starts at i.
size_t run_end(std::string_view s, size_t i, CharClass cls) {
  const unsigned char* p = bytes(s);
  const unsigned char* end = p + s.size();
  int len = 0;
  while (i < s.size() && class_at(p + i, end, &len) == cls) i += static_cast<size_t>(len);
  return i;
}

}  // namespace

size_t piece_end(std::string_view s, size_t i) {
  if (const size_t c = contraction(s, i)) return i + c;
  const unsigned char* p = bytes(s);
  const unsigned char* end = p + s.size();
  int len = 0;
  const CharClass first = class_at(p + i, end, &len);
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space (U+0020 only), then a run.
  if (first != CharClass::kSpace) return run_end(s, i, first);
  if (s[i] == ' ' && i + 1 < s.size()) {
    int next_len = 0;
    const CharClass next = class_at(p + i + 1, end, &next_len);
    if (next != CharClass::kSpace) return run_end(s, i + 1, next);
  }
  // "\s+(?!\S)": the whitespace run, less its last character when something follows it; a
  // single whitespace character before a non-space is "\s+".
  size_t j = i, last = i;
  while (j < s.size() && class_at(p + j, end, &len) == CharClass::kSpace) {
    last = j;
    j += static_cast<size_t>(len);
  }
  if (j == s.size() || last == i) return j;
  return last;
}

size_t next_safe_cut(std::string_view s, size_t from) {
  const unsigned char* p = bytes(s);
  const unsigned char* end = p + s.size();
  for (size_t q = from == 0 ? 1 : from; q < s.size(); ++q) {
    const unsigned char b = p[q];
    if (!(b == ' ' || (b >= '\t' && b <= '\r'))) continue;
    // The character before q: ASCII, or the well-formed sequence that ends at q, or (when the
    // bytes before q are not one) an invalid byte, which is "other".
    size_t k = q - 1;
    while (k > 0 && q - k < 4 && (p[k] & 0xC0) == 0x80) --k;
    const Utf8Unit u = utf8_unit(p + k, end);
    const bool before_is_space =
        u.valid && k + static_cast<size_t>(u.len) == q && char_class(u.cp) == CharClass::kSpace;
    if (!before_is_space) return q;
  }
  return std::string::npos;
}

}  // namespace trainrun
