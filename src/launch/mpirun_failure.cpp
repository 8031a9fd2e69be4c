// Open MPI 4.1 explains a failed job in boxed help messages on stderr, wrapped over lines:
//   "Process name: [[29619,1],1]\n  Exit code:    3"                       (non-zero exit)
//   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
//   "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 5."
//   (or "in communicator MPI COMMUNICATOR 3 DUP FROM 0", the watchdog's duplicate)
//   "mpirun has exited due to process rank 1 with PID 0 on\nnode vm exiting improperly."
//   "...could not access or execute an executable:\n\nExecutable: ./x\nNode: vm"
// Whitespace is collapsed first so line wrapping does not matter; the earliest report wins,
// since the first rank to fail is the cause and the rest are usually its consequences.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
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

// Each reader parses the message starting at its anchor, or returns no text when it is not
// there. sscanf keeps this free of std::regex (slow, and it trips GCC 12 warnings under
// sanitizers).
MpirunFailure exit_code(const char* at) {
  int rank = 0, code = 0;
  if (std::sscanf(at, "Process name: [[%*d,%*d],%d] Exit code: %d", &rank, &code) != 2) return {};
  return {fmt::format("rank {} exited with code {}", rank, code), rank, ""};
}

MpirunFailure rank_ended(const char* at) {
  int rank = 0, sig = 0, used = 0;
  char node[256] = {};
  if (std::sscanf(at, "process rank %d with PID %*d on node %255s %n", &rank, node, &used) != 2 ||
      used == 0)
    return {};
  const char* rest = at + used;
  if (std::strncmp(rest, "exiting improperly", 18) == 0)
    return {fmt::format("rank {} on {} exited without finalizing MPI", rank, node), rank, node};
  int after_sig = 0;
  if (std::sscanf(rest, "exited on signal %d%n", &sig, &after_sig) != 1) return {};
  char name[64] = {};
  if (std::sscanf(rest + after_sig, " (%63[^)])", name) == 1)
    return {fmt::format("rank {} on {} killed by signal {} ({})", rank, node, sig, name), rank,
            node};
  return {fmt::format("rank {} on {} killed by signal {}", rank, node, sig), rank, node};
}

// The communicator's name may be several words ("MPI COMMUNICATOR 3 DUP FROM 0").
MpirunFailure aborted(const char* at) {
  int rank = 0, code = 0, used = 0;
  if (std::sscanf(at, "MPI_ABORT was invoked on rank %d in communicator %n", &rank, &used) != 1 ||
      used == 0)
    return {};
  const char* with = std::strstr(at + used, " with errorcode ");
  if (!with || with - (at + used) > 200 || std::sscanf(with, " with errorcode %d", &code) != 1)
    return {};
  return {fmt::format("rank {} called MPI_Abort with code {}", rank, code), rank, ""};
}

MpirunFailure not_executable(const char* at) {
  char exe[1024] = {}, node[256] = {};
  if (std::sscanf(at, "execute an executable: Executable: %1023s Node: %255s", exe, node) != 2)
    return {};
  return {fmt::format("mpirun could not execute {} on {}", exe, node), -1, node};
}

struct Reader {
  const char* anchor;
  MpirunFailure (*read)(const char*);
};
constexpr Reader kReaders[] = {
    {"Process name:", exit_code},
    {"process rank", rank_ended},
    {"MPI_ABORT was invoked", aborted},
    {"execute an executable", not_executable},
};

}  // namespace

MpirunFailure read_mpirun_failure(const std::string& mpirun_stderr) {
  const std::string text = collapse_whitespace(mpirun_stderr);
  size_t best_pos = std::string::npos;
  MpirunFailure best;
  for (const Reader& r : kReaders) {
    for (size_t pos = text.find(r.anchor); pos != std::string::npos && pos < best_pos;
         pos = text.find(r.anchor, pos + 1)) {
      if (MpirunFailure d = r.read(text.c_str() + pos); !d.text.empty()) {
        best_pos = pos;
        best = std::move(d);
        break;
      }
    }
  }
  return best;
}

std::string describe_mpirun_failure(const std::string& mpirun_stderr) {
  return read_mpirun_failure(mpirun_stderr).text;
}

}  // namespace trainrun
