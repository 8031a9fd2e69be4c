// Rows of cells as an aligned text table, columns two spaces apart, the header row underlined:
// what `compare` and `runs` print. Private to src/report.
#pragma once

#include <string>
#include <vector>

namespace trainrun::report {

std::string text_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace trainrun::report
