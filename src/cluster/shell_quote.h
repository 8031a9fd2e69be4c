// Quoting for the two languages a generated job script speaks: bash (the body) and sbatch's own
// #SBATCH parser (which knows double quotes only, not the shell's rules).
#pragma once

#include <string>
#include <string_view>

namespace trainrun::cluster_detail {

// A bash word that expands to exactly `s`: bare when it holds only safe characters, otherwise
// in single quotes with each ' written as '\''.
std::string shell_quote(std::string_view s);

// The value of an #SBATCH option: bare, or in double quotes when it holds whitespace. Throws
// ConfigError naming `what` for characters sbatch cannot carry (", \, newline, control chars).
std::string sbatch_value(std::string_view s, std::string_view what);

}  // namespace trainrun::cluster_detail
