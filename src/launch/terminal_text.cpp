// Error messages on the terminal: they quote config values and rank messages, which may hold
// any byte, so control characters are shown escaped instead of driving the terminal.
#include <fmt/format.h>

#include <cstdio>

#include "trainrun/launch/run_command.h"

namespace trainrun {

std::string printable(const std::string& text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = byte(i);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < text.size() && byte(i + 1) >= 0x80 && byte(i + 1) <= 0x9f) {
      // A C1 control in UTF-8 (U+0080..U+009F): terminals act on some of them too.
      out += fmt::format("\\u{:04x}", byte(++i));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void print_error(const std::string& message) {
  fmt::print(stderr, "error: {}\n", printable(message));
}

}  // namespace trainrun
