#include "suggest.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "schema.h"

namespace trainrun::config {
namespace {

// How many edits still look like a typo rather than a different word.
int tolerance(std::string_view word) {
  if (word.size() <= 3) return 1;
  if (word.size() <= 6) return 2;
  return 3;
}

std::string_view leaf_of(std::string_view key) {
  auto dot = key.find('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

std::string_view section_of(std::string_view key) {
  auto dot = key.find('.');
  return dot == std::string_view::npos ? std::string_view{} : key.substr(0, dot);
}

}  // namespace

int edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance, three rolling rows.
  const size_t n = b.size();
  std::vector<int> prev2(n + 1), prev(n + 1), cur(n + 1);
  for (size_t j = 0; j <= n; ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= n; ++j) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[n];
}

std::optional<std::string> suggest_key(std::string_view unknown) {
  const auto sec = section_of(unknown);
  const auto leaf = leaf_of(unknown);
  int best = std::numeric_limits<int>::max();
  std::string_view best_key;
  auto consider = [&](std::string_view candidate, int d) {
    if (d < best) {
      best = d;
      best_key = candidate;
    }
  };
  for (const auto& f : schema()) {
    int d = edit_distance(unknown, f.key);
    if (!sec.empty() && sec == f.section()) {
      d = std::min(d, edit_distance(leaf, f.leaf()));
    } else if (leaf == f.leaf()) {
      d = std::min(d, 1);  // the right name in the wrong place
    }
    consider(f.key, d);
  }
  for (auto s : sections()) consider(s, edit_distance(unknown, s));
  if (best == 0 || best > tolerance(leaf)) return std::nullopt;
  return std::string(best_key);
}

std::optional<std::string> suggest_word(std::string_view word,
                                        const std::vector<std::string_view>& candidates) {
  int best = std::numeric_limits<int>::max();
  std::string_view best_word;
  for (auto c : candidates) {
    if (c.empty()) continue;
    int d = edit_distance(word, c);
    if (d < best) {
      best = d;
      best_word = c;
    }
  }
  if (best == 0 || best > tolerance(word)) return std::nullopt;
  return std::string(best_word);
}

}  // namespace trainrun::config
