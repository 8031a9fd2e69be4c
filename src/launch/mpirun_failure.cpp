// Open MPI 4.1 explains a failed job in boxed help messages on stderr, wrapped over lines:
//   "Process name: [[29619,1],1]\n  Exit code:    3"                       (non-zero exit)
//   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
//   "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 5."
//   "mpirun has exited due to process rank 1 with PID 0 on\nnode vm exiting improperly."
//   "...could not access or execute an executable:\n\nExecutable: ./x\nNode: vm"
// Whitespace is collapsed first so line wrapping does not matter; the earliest report wins,
// since the first rank to fail is the cause and the rest are usually its consequences.
#include <fmt/format.h>

#include <regex>
#include <string>

#include "trainrun/mpirun_failure.h"

namespace trainrun {
namespace {

std::string collapse_whitespace(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      space = true;
    } else {
      if (space && !out.empty()) out += ' ';
      space = false;
      out += c;
    }
  }
  return out;
}

struct Pattern {
  const char* anchor;  // cheap substring search first; the regex only reads a window after it
  std::regex re;
  std::string (*describe)(const std::smatch&);
};

const std::vector<Pattern>& patterns() {
  static const std::vector<Pattern> p = {
      {"Process name:", std::regex(R"(Process name: \[\[\d+,\d+\],(\d+)\] Exit code: (-?\d+))"),
       [](const std::smatch& m) {
         return fmt::format("rank {} exited with code {}", m[1].str(), m[2].str());
       }},
      {"process rank",
       std::regex(
           R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)"),
       [](const std::smatch& m) {
         std::string name = m[4].matched ? fmt::format(" ({})", m[4].str()) : "";
         return fmt::format("rank {} on {} killed by signal {}{}", m[1].str(), m[2].str(),
                            m[3].str(), name);
       }},
      {"process rank",
       std::regex(R"(process rank (\d+) with PID \d+ on node (\S+) exiting improperly)"),
       [](const std::smatch& m) {
         return fmt::format("rank {} on {} exited without finalizing MPI", m[1].str(), m[2].str());
       }},
      {"MPI_ABORT was invoked",
       std::regex(
           R"(MPI_ABORT was invoked on rank (\d+) in communicator \S+ with errorcode (-?\d+))"),
       [](const std::smatch& m) {
         return fmt::format("rank {} called MPI_Abort with code {}", m[1].str(), m[2].str());
       }},
      {"execute an executable",
       std::regex(R"(execute an executable: Executable: (\S+) Node: (\S+))"),
       [](const std::smatch& m) {
         return fmt::format("mpirun could not execute {} on {}", m[1].str(), m[2].str());
       }},
  };
  return p;
}

}  // namespace

std::string describe_mpirun_failure(const std::string& mpirun_stderr) {
  const std::string text = collapse_whitespace(mpirun_stderr);
  size_t best_pos = std::string::npos;
  std::string best;
  for (const Pattern& p : patterns()) {
    for (size_t pos = text.find(p.anchor); pos != std::string::npos && pos < best_pos;
         pos = text.find(p.anchor, pos + 1)) {
      // Anchors sit at most a few words into their message; 400 characters hold any of them.
      const std::string window = text.substr(pos > 40 ? pos - 40 : 0, 440);
      std::smatch m;
      if (std::regex_search(window, m, p.re)) {
        best_pos = pos;
        best = p.describe(m);
        break;
      }
    }
  }
  return best;
}

}  // namespace trainrun
