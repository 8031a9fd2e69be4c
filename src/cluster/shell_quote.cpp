#include "shell_quote.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "trainrun/core/errors.h"

namespace trainrun::cluster_detail {

std::string shell_quote(std::string_view s) {
  const bool safe = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string sbatch_value(std::string_view s, std::string_view what) {
  bool space = false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || (std::iscntrl(u) && c != ' ' && c != '\t'))
      throw ConfigError(fmt::format(
          "{} '{}' holds a character an #SBATCH line cannot carry (a double quote, backslash or "
          "control character): rename it",
          what, std::string(s)));
    space = space || std::isspace(u);
  }
  return space ? fmt::format("\"{}\"", s) : std::string(s);
}

}  // namespace trainrun::cluster_detail
