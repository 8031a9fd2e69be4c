// The byte-level BPE model behind Tokenizer: token byte strings, ranked merges and the added
// (special) tokens, with encode and decode as Hugging Face's `tokenizers` does them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trainrun {

// A token matched verbatim in the text before it is split (e.g. <|endoftext|>).
struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
};

struct BpeModel {
  std::vector<std::string> tokens;                  // id -> raw bytes (model vocabulary)
  std::vector<std::pair<int32_t, int32_t>> merges;  // in rank order: rank 0 applies first
  std::vector<AddedToken> added;
  bool add_prefix_space = false;  // ByteLevel: a space before text that does not start with one
  bool ignore_merges = false;     // a piece that is itself a token is not merged up

  // Fills the lookup tables below from tokens, merges and added; throws DataError (naming
  // `what`) for duplicate tokens or a merge whose parts or result are not tokens.
  void index(const std::string& what);

  int vocab_size() const;
  // Appends the ids of text.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  // Lookup tables (index()).
  std::unordered_map<std::string, int32_t> id_of;  // raw bytes -> id
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merge_of;  // (left << 32 | right) -> rank and result
  std::array<int32_t, 256> byte_id{};            // -1: the byte is not a token

  static uint64_t pair_key(int32_t a, int32_t b) {
    return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
  }
};

// The ids of one piece, merged as `tokenizers` does: the lowest-ranked pair first, the leftmost
// of equal ones. A byte that is not a token is dropped (tokenizers without unk_token does so).
void bpe_merge_piece(const BpeModel& m, std::string_view piece, std::vector<int32_t>& out);

}  // namespace trainrun
