// unreachable_hosts (host_probe.h): one child per host, all at once, every one killed at the
// deadline, so a dead host costs the timeout once rather than once per host.
#include "host_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "trainrun/runtime/host.h"

extern char** environ;

namespace trainrun {

std::vector<std::string> unreachable_hosts(const std::vector<std::string>& hosts,
                                           double timeout_s) {
  const char* env_agent = std::getenv("OMPI_MCA_plm_rsh_agent");
  const std::string agent = env_agent && *env_agent ? env_agent : "ssh";
  const bool ssh =
      agent == "ssh" || agent.starts_with("ssh ") || agent.find("/ssh") != std::string::npos;
  const int connect = std::max(1, static_cast<int>(std::ceil(timeout_s)));
  // The agent may carry its own arguments ("ssh -F cfg"): the shell splits it, as mpirun does.
  const std::string script =
      fmt::format("exec {}{} \"$1\" true", agent,
                  ssh ? fmt::format(" -o BatchMode=yes -o ConnectTimeout={}", connect) : "");
  const std::string me = host_name();

  struct Probe {
    std::string host;
    pid_t pid = -1;
    bool answered = false;
  };
  std::vector<Probe> probes;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd <= 2; ++fd)
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  for (const std::string& host : hosts) {
    if (host == me || host == "localhost" || host == "127.0.0.1") continue;
    Probe p{host};
    std::vector<std::string> args = {"/bin/sh", "-c", script, "sh", host};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&p.pid, "/bin/sh", &actions, nullptr, argv.data(), environ) != 0) p.pid = -1;
    probes.push_back(std::move(p));
  }
  posix_spawn_file_actions_destroy(&actions);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (size_t waiting = probes.size(); waiting > 0;) {
    waiting = 0;
    for (Probe& p : probes) {
      if (p.pid < 0) continue;
      int status = 0;
      const pid_t r = waitpid(p.pid, &status, WNOHANG);
      if (r == p.pid) {
        p.answered = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        p.pid = -1;
      } else {
        ++waiting;
      }
    }
    if (waiting == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (Probe& p : probes)
        if (p.pid >= 0) {
          kill(p.pid, SIGKILL);
          waitpid(p.pid, nullptr, 0);
          p.pid = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> silent;
  for (const Probe& p : probes)
    if (!p.answered) silent.push_back(p.host);
  return silent;
}

}  // namespace trainrun
