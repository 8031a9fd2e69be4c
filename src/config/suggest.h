// "Did you mean ...?" for misspelled keys and enum values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun::config {

// Edit distance counting a swap of two neighbouring letters as one edit ("modle" -> "model").
int edit_distance(std::string_view a, std::string_view b);

// The schema key (or section name) closest to `unknown`, comparing full paths and, within the
// same section, leaf names; a leaf that exists in another section ("train.lr") also matches.
std::optional<std::string> suggest_key(std::string_view unknown);

// The closest of `candidates` to `word`, if close enough to be a likely typo.
std::optional<std::string> suggest_word(std::string_view word,
                                        const std::vector<std::string_view>& candidates);

}  // namespace trainrun::config
