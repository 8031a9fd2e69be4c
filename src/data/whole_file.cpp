// read_whole_file (whole_file.h).
#include "whole_file.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "trainrun/core/errors.h"

namespace trainrun {

std::string read_whole_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw DataError(fmt::format(
        "{}: not a regular file (a directory, device or FIFO); point it at a file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(
        fmt::format("{}: cannot read it ({}); check the path", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace trainrun
