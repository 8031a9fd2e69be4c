#include "prepare_inputs.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "trainrun/core/errors.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

PrepareInput regular_file(std::string path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw DataError(fmt::format("{}: not a readable regular file; point it at a text file", path));
  const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return {std::move(path), static_cast<uint64_t>(st.st_size), mtime};
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Where a path's directory is, by any path to it (a directory that does not exist yet: its
// normalised absolute path).
fs::path where(const fs::path& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir.empty() ? fs::path(".") : dir, ec), ec);
  return p;
}

// The outputs as (directory, file name) pairs, compared with each listed file's.
struct Outputs {
  std::vector<std::pair<fs::path, std::string>> files;
  explicit Outputs(const std::vector<std::string>& outputs) {
    for (const std::string& o : outputs)
      files.emplace_back(where(fs::path(o).parent_path()), fs::path(o).filename().string());
  }
  bool holds(const fs::path& file) const {
    if (files.empty()) return false;
    const std::string name = file.filename().string();
    const fs::path dir = where(file.parent_path());
    for (const auto& [d, n] : files)
      if (d == dir && (name == n || name.rfind(n + ".tmp", 0) == 0)) return true;
    return false;
  }
};

}  // namespace

std::vector<PrepareInput> prepare_inputs(const std::vector<std::string>& texts,
                                         const std::vector<std::string>& outputs) {
  const Outputs ours(outputs);
  std::vector<PrepareInput> out;
  for (const std::string& t : texts) {
    std::error_code ec;
    if (!fs::is_directory(t, ec)) {
      out.push_back(regular_file(t));
      continue;
    }
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(t, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      if (hidden(it->path())) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec) && !ours.holds(it->path())) files.push_back(it->path().string());
    }
    if (ec) throw DataError(fmt::format("{}: cannot list the directory ({})", t, ec.message()));
    if (files.empty())
      throw DataError(fmt::format("{}: a directory with no files in it; point at text files", t));
    std::sort(files.begin(), files.end());
    for (std::string& f : files) out.push_back(regular_file(std::move(f)));
  }
  return out;
}

void create_output_directory(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw DataError(fmt::format("cannot create the output directory {} ({})", dir, ec.message()));
}

PrepareProgress::PrepareProgress(bool on, uint64_t total_bytes, uint64_t already_done)
    : on_(on), tty_(::isatty(2) != 0), total_(total_bytes), base_(already_done) {}

PrepareProgress::~PrepareProgress() {
  if (drawn_ && tty_) std::fputc('\n', stderr);
}

void PrepareProgress::update(uint64_t done, uint64_t tokens) {
  if (!on_) return;
  const auto now = Clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::seconds(10))) return;
  last_ = now;
  const double s = std::chrono::duration<double>(now - start_).count();
  const double rate = s > 0 && done > base_ ? static_cast<double>(done - base_) / s : 0;  // B/s
  std::string eta = "?";
  if (rate > 0 && total_ >= done) {
    const auto left = static_cast<int64_t>(static_cast<double>(total_ - done) / rate);
    eta = left >= 3600 ? fmt::format("{}h{:02}m", left / 3600, left / 60 % 60)
          : left >= 60 ? fmt::format("{}m{:02}s", left / 60, left % 60)
                       : fmt::format("{}s", left);
  }
  std::fprintf(stderr, "%stokenizing: %5.1f%% %.1f/%.1f MB, %.1f MB/s, %llu tokens, ETA %s%s",
               tty_ ? "\r" : "",
               total_ ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
               static_cast<double>(done) / 1e6, static_cast<double>(total_) / 1e6, rate / 1e6,
               static_cast<unsigned long long>(tokens), eta.c_str(), tty_ ? "   " : "\n");
  drawn_ = true;
}

}  // namespace trainrun
