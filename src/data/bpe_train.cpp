// Training a byte-level BPE: count the split's pieces (in parallel), then merge the most frequent
// pair until the vocabulary is full. Pair counts are updated incrementally: a merge touches only
// the words that hold its pair (an index from pair to words), and the best pair comes from a
// max-heap whose stale entries are re-queued with their current count when they surface.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "bpe_model.h"
#include "pretokenize.h"
#include "text_blocks.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/tokenizer.h"

namespace trainrun {

namespace {

using WordCounts = std::unordered_map<std::string, int64_t>;

void check_vocab_size(int vocab_size) {
  if (vocab_size < 256 || vocab_size > (1 << 30))
    throw ConfigError(fmt::format(
        "--vocab-size {} must be at least 256 (the bytes) and at most 2^30", vocab_size));
}

void count_pieces(std::string_view text, WordCounts& counts) {
  for_each_piece(text, [&](std::string_view p) { ++counts[std::string(p)]; });
}

struct Candidate {
  int64_t count;
  int32_t a, b;
  // The heap's top is the largest count; ties go to the smaller pair, so training is
  // deterministic.
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    return a != o.a ? a > o.a : b > o.b;
  }
};

class Trainer {
 public:
  explicit Trainer(const WordCounts& counts) {
    for (const auto& [w, c] : counts) {
      std::vector<int32_t> s(w.begin(), w.end());
      for (auto& x : s) x = static_cast<unsigned char>(x);  // token b is byte b
      words_.push_back(std::move(s));
      freq_.push_back(c);
    }
    // Word order must not depend on the hash map's: sort by bytes.
    std::vector<size_t> order(words_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return words_[x] < words_[y]; });
    std::vector<std::vector<int32_t>> w2;
    std::vector<int64_t> f2;
    for (size_t i : order) {
      w2.push_back(std::move(words_[i]));
      f2.push_back(freq_[i]);
    }
    words_.swap(w2);
    freq_.swap(f2);
    for (size_t w = 0; w < words_.size(); ++w)
      for (size_t i = 0; i + 1 < words_[w].size(); ++i)
        add(words_[w][i], words_[w][i + 1], freq_[w], static_cast<int32_t>(w));
    for (const auto& [key, c] : count_) heap_.push({c, unkey(key).first, unkey(key).second});
  }

  std::shared_ptr<BpeModel> run(int vocab_size) {
    auto m = std::make_shared<BpeModel>();
    std::unordered_map<std::string, int32_t> id_of;
    for (int b = 0; b < 256; ++b) {
      m->tokens.emplace_back(1, static_cast<char>(b));
      id_of.emplace(m->tokens.back(), b);
    }
    while (static_cast<int>(m->tokens.size()) < vocab_size && !heap_.empty()) {
      const Candidate c = heap_.top();
      heap_.pop();
      const uint64_t key = BpeModel::pair_key(c.a, c.b);
      const auto it = count_.find(key);
      const int64_t now = it == count_.end() ? 0 : it->second;
      if (now != c.count) {
        if (now > 0) heap_.push({now, c.a, c.b});
        continue;
      }
      std::string merged =
          m->tokens[static_cast<size_t>(c.a)] + m->tokens[static_cast<size_t>(c.b)];
      auto [pos, fresh] = id_of.emplace(merged, static_cast<int32_t>(m->tokens.size()));
      if (fresh) m->tokens.push_back(std::move(merged));
      m->merges.emplace_back(c.a, c.b);
      merge(c.a, c.b, pos->second);
    }
    return m;
  }

 private:
  static std::pair<int32_t, int32_t> unkey(uint64_t k) {
    return {static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)};
  }
  void add(int32_t a, int32_t b, int64_t c, int32_t word) {
    const uint64_t key = BpeModel::pair_key(a, b);
    count_[key] += c;
    auto& ws = where_[key];
    if (ws.empty() || ws.back() != word) ws.push_back(word);
  }

  // Replaces every (a, b) in the words that hold it by `id`, left to right, and updates the
  // counts of the pairs around each replacement.
  void merge(int32_t a, int32_t b, int32_t id) {
    const uint64_t key = BpeModel::pair_key(a, b);
    std::vector<int32_t> ws = std::move(where_[key]);
    where_.erase(key);
    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    std::unordered_map<uint64_t, int64_t> delta;
    std::vector<std::pair<uint64_t, int32_t>> grown;  // (pair, word) that gained an occurrence
    for (const int32_t w : ws) {
      std::vector<int32_t>& s = words_[static_cast<size_t>(w)];
      const int64_t f = freq_[static_cast<size_t>(w)];
      size_t j = 0;  // in-place: s[0, j) is the merged output, s[i, ...) the input still to read
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          if (j > 0) {
            delta[BpeModel::pair_key(s[j - 1], a)] -= f;
            delta[BpeModel::pair_key(s[j - 1], id)] += f;
            grown.emplace_back(BpeModel::pair_key(s[j - 1], id), w);
          }
          if (i + 2 < s.size()) {
            delta[BpeModel::pair_key(b, s[i + 2])] -= f;
            delta[BpeModel::pair_key(id, s[i + 2])] += f;
            grown.emplace_back(BpeModel::pair_key(id, s[i + 2]), w);
          }
          delta[key] -= f;
          s[j++] = id;
          i += 2;
        } else {
          s[j++] = s[i++];
        }
      }
      s.resize(j);
    }
    for (const auto& [p, w] : grown) {
      auto& list = where_[p];
      if (list.empty() || list.back() != w) list.push_back(w);
    }
    for (const auto& [p, d] : delta) {
      if (d == 0) continue;
      int64_t& c = count_[p];
      c += d;
      if (c <= 0) {
        count_.erase(p);
      } else if (d > 0) {
        heap_.push({c, unkey(p).first, unkey(p).second});
      }
    }
  }

  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> freq_;
  std::unordered_map<uint64_t, int64_t> count_;               // pair -> occurrences
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;  // pair -> words (may be stale)
  std::priority_queue<Candidate> heap_;
};

Tokenizer train_on_counts(const WordCounts& counts, int vocab_size) {
  auto m = Trainer(counts).run(vocab_size);
  m->index("trained tokenizer");
  return Tokenizer(std::move(m));
}

}  // namespace

Tokenizer train_tokenizer_on_text(std::string_view text, int vocab_size) {
  check_vocab_size(vocab_size);
  WordCounts counts;
  count_pieces(text, counts);
  return train_on_counts(counts, vocab_size);
}

Tokenizer train_tokenizer(const std::vector<std::string>& files, int vocab_size, int threads) {
  check_vocab_size(vocab_size);
  if (files.empty()) throw ConfigError("no text files to train the tokenizer on");
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  WordCounts counts;
  std::vector<WordCounts> local(static_cast<size_t>(nt));
  std::vector<TextSegment> segs;
  for (const std::string& f : files) {
    TextBlocks blocks(f, size_t{64} << 20, size_t{256} << 10);
    while (blocks.next(segs)) {
      const auto n = static_cast<int64_t>(segs.size());
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
      for (int64_t i = 0; i < n; ++i)
        count_pieces(segs[static_cast<size_t>(i)].text,
                     local[static_cast<size_t>(omp_get_thread_num())]);
      for (WordCounts& l : local) {
        for (auto& [w, c] : l) counts[w] += c;
        l.clear();
      }
    }
  }
  return train_on_counts(counts, vocab_size);
}

}  // namespace trainrun
