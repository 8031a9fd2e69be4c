// The GPT-2 pre-tokenizer split, by hand over UTF-8 code points: the pieces that byte-level BPE
// then encodes one at a time. It matches the regex (tokenizers' ByteLevel, use_regex: true)
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// leftmost first, with an invalid UTF-8 byte counted as one "other" character.
#pragma once

#include <cstddef>
#include <string_view>

namespace trainrun {

// End (byte offset) of the piece that starts at `start` (< text.size()).
size_t piece_end(std::string_view text, size_t start);

// Calls f(piece) for each piece of text, in order; the pieces concatenate to text.
template <typename F>
void for_each_piece(std::string_view text, F&& f) {
  for (size_t i = 0; i < text.size();) {
    const size_t e = piece_end(text, i);
    f(text.substr(i, e - i));
    i = e;
  }
}

// The first offset q in [from, text.size()) where every text that begins with text[0, q] has a
// piece boundary, found without splitting what comes before: a whitespace byte after a
// character that is not whitespace (no piece spans that step, and none looks further). Text cut
// there splits into the same pieces as the whole. Returns npos when there is none.
size_t next_safe_cut(std::string_view text, size_t from);

}  // namespace trainrun
