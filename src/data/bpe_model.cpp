// Byte-level BPE encode and decode (bpe_model.h).
#include "bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <queue>

#include "pretokenize.h"
#include "trainrun/core/errors.h"

namespace trainrun {

void BpeModel::index(const std::string& what) {
  id_of.clear();
  merge_of.clear();
  byte_id.fill(-1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) continue;  // an id used only by an added token
    if (!id_of.emplace(tokens[i], static_cast<int32_t>(i)).second)
      throw DataError(fmt::format("{}: the vocabulary holds the token '{}' twice (ids {} and {})",
                                  what, tokens[i], id_of[tokens[i]], i));
    if (tokens[i].size() == 1)
      byte_id[static_cast<unsigned char>(tokens[i][0])] = static_cast<int32_t>(i);
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto [a, b] = merges[r];
    const auto it = id_of.find(tokens[static_cast<size_t>(a)] + tokens[static_cast<size_t>(b)]);
    if (it == id_of.end())
      throw DataError(fmt::format("{}: merge {} ('{}' + '{}') makes a token not in the vocabulary",
                                  what, r, tokens[static_cast<size_t>(a)],
                                  tokens[static_cast<size_t>(b)]));
    // A pair listed twice keeps its first (lowest) rank, as tokenizers does.
    merge_of.emplace(pair_key(a, b), Merge{static_cast<int32_t>(r), it->second});
  }
}

int BpeModel::vocab_size() const {
  int32_t n = static_cast<int32_t>(tokens.size());
  for (const AddedToken& t : added) n = std::max(n, t.id + 1);
  return n;
}

void bpe_merge_piece(const BpeModel& m, std::string_view piece, std::vector<int32_t>& out) {
  if (m.ignore_merges) {
    const auto it = m.id_of.find(std::string(piece));
    if (it != m.id_of.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(piece.size());
  for (const char c : piece) {
    const int32_t id = m.byte_id[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  // (rank, position of the left symbol, result): lowest rank first, then leftmost.
  struct Cand {
    int32_t rank, pos, id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    const int32_t right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const auto it = m.merge_of.find(BpeModel::pair_key(syms[static_cast<size_t>(left)].id,
                                                       syms[static_cast<size_t>(right)].id));
    if (it != m.merge_of.end()) queue.push({it->second.rank, left, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& left = syms[static_cast<size_t>(c.pos)];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or now the last symbol
    Sym& right = syms[static_cast<size_t>(left.next)];
    const auto it = m.merge_of.find(BpeModel::pair_key(left.id, right.id));
    if (it == m.merge_of.end() || it->second.rank != c.rank || it->second.id != c.id)
      continue;  // the pair changed since this candidate was queued
    left.id = c.id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) syms[static_cast<size_t>(left.next)].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next)
    out.push_back(syms[static_cast<size_t>(i)].id);
}

namespace {

// Encodes the pieces of one stretch of text between added tokens. Pieces repeat (words), so
// their ids are cached for the call; the cache keys point into text.
class PieceEncoder {
 public:
  explicit PieceEncoder(const BpeModel& m) : m_(m) {}
  void encode(std::string_view text, std::vector<int32_t>& out) {
    for_each_piece(text, [&](std::string_view piece) {
      const auto it = cache_.find(piece);
      if (it != cache_.end()) {
        out.insert(out.end(), store_.begin() + it->second.first,
                   store_.begin() + it->second.first + it->second.second);
        return;
      }
      if (cache_.size() >= kMaxCached) {
        cache_.clear();
        store_.clear();
      }
      const size_t at = store_.size();
      bpe_merge_piece(m_, piece, store_);
      cache_.emplace(piece, std::make_pair(at, store_.size() - at));
      out.insert(out.end(), store_.begin() + static_cast<std::ptrdiff_t>(at), store_.end());
    });
  }

 private:
  static constexpr size_t kMaxCached = 1 << 18;
  const BpeModel& m_;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache_;
  std::vector<int32_t> store_;
};

// The longest added token that starts at text[i], or nullptr.
const AddedToken* added_at(const std::vector<AddedToken>& added, std::string_view text, size_t i) {
  const AddedToken* best = nullptr;
  for (const AddedToken& t : added)
    if (text.compare(i, t.content.size(), t.content) == 0 &&
        (!best || t.content.size() > best->content.size()))
      best = &t;
  return best;
}

}  // namespace

void BpeModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  PieceEncoder enc(*this);
  auto plain = [&](std::string_view s) {
    if (s.empty()) return;
    if (add_prefix_space && s[0] != ' ') {
      std::string prefixed(s.size() + 1, ' ');
      std::memcpy(prefixed.data() + 1, s.data(), s.size());
      PieceEncoder(*this).encode(prefixed, out);  // its cache points into `prefixed`
      return;
    }
    enc.encode(s, out);
  };
  if (added.empty()) return plain(text);
  // Added tokens are found first, leftmost and longest, as tokenizers' AddedVocabulary does;
  // the text between them is split and merged on its own.
  std::array<bool, 256> starts{};
  for (const AddedToken& t : added)
    if (!t.content.empty()) starts[static_cast<unsigned char>(t.content[0])] = true;
  size_t from = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!starts[static_cast<unsigned char>(text[i])]) continue;
    const AddedToken* t = added_at(added, text, i);
    if (!t) continue;
    plain(text.substr(from, i - from));
    out.push_back(t->id);
    i += t->content.size() - 1;
    from = i + 1;
  }
  plain(text.substr(from));
}

std::string BpeModel::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < tokens.size() &&
        !tokens[static_cast<size_t>(id)].empty()) {
      out += tokens[static_cast<size_t>(id)];
      continue;
    }
    const auto it =
        std::find_if(added.begin(), added.end(), [id](const AddedToken& t) { return t.id == id; });
    if (it == added.end())
      throw DataError(fmt::format("token id {} is not in the tokenizer's vocabulary ({} ids)", id,
                                  vocab_size()));
    out += it->content;
  }
  return out;
}

}  // namespace trainrun
