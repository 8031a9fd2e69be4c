// Open MPI 4.1 explains a failed job in boxed help messages on stderr, wrapped over lines:
//   "Process name: [[29619,1],1]\n  Exit code:    3"                       (non-zero exit)
//   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
//   "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 5."
//   (or "in communicator MPI COMMUNICATOR 3 DUP FROM 0", the watchdog's duplicate)
//   "mpirun has exited due to process rank 1 with PID 0 on\nnode vm exiting improperly."
//   "...could not access or execute an executable:\n\nExecutable: ./x\nNode: vm"
//   "ORTE was unable to reliably start one or more daemons." (a host unreachable at launch;
//   ssh said which: "ssh: connect to host node2 port 22: No route to host")
//   "An ORTE daemon has unexpectedly failed after launch and before communicating back to
//   mpirun." (the same, after ssh got through)
// Whitespace is collapsed first so line wrapping does not matter; the earliest report wins,
// since the first rank to fail is the cause and the rest are usually its consequences.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "trainrun/launch/mpirun_failure.h"

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
  return {fmt::format("mpirun could not execute {} on {}", exe, node), -1, node, true};
}

// The host ssh could not reach, when it said so anywhere in the text; "" otherwise.
std::string ssh_host(const char* text) {
  char host[256] = {};
  for (const char* form :
       {"ssh: connect to host %255s", "ssh: Could not resolve hostname %255[^: ]"})
    for (const char* at = std::strstr(text, "ssh: "); at; at = std::strstr(at + 1, "ssh: "))
      if (std::sscanf(at, form, host) == 1) return host;
  return "";
}

// Open MPI's daemons did not come up: the job never started. `text` is the whole report (the
// ssh line that names the host usually comes before the box).
MpirunFailure daemons_not_started(const char* at, const char* text) {
  const std::string host = ssh_host(text);
  const char* what = std::strncmp(at, "ORTE was unable", 15) == 0
                         ? "mpirun could not start its daemon"
                         : "mpirun's daemon failed before reporting back";
  return {host.empty() ? fmt::format("{} on a host (unreachable?); no rank started", what)
                       : fmt::format("{} on {} (unreachable?); no rank started", what, host),
          -1, host, true};
}

struct Reader {
  const char* anchor;
  MpirunFailure (*read)(const char* at, const char* text);
};
template <MpirunFailure (*F)(const char*)>
MpirunFailure at_only(const char* at, const char*) {
  return F(at);
}
constexpr Reader kReaders[] = {
    {"Process name:", at_only<exit_code>},
    {"process rank", at_only<rank_ended>},
    {"MPI_ABORT was invoked", at_only<aborted>},
    {"execute an executable", at_only<not_executable>},
    {"ORTE was unable to reliably start", daemons_not_started},
    {"An ORTE daemon has unexpectedly failed after launch", daemons_not_started},
};

}  // namespace

MpirunFailure read_mpirun_failure(const std::string& mpirun_stderr) {
  const std::string text = collapse_whitespace(mpirun_stderr);
  size_t best_pos = std::string::npos;
  MpirunFailure best;
  for (const Reader& r : kReaders) {
    for (size_t pos = text.find(r.anchor); pos != std::string::npos && pos < best_pos;
         pos = text.find(r.anchor, pos + 1)) {
      if (MpirunFailure d = r.read(text.c_str() + pos, text.c_str()); !d.text.empty()) {
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
