// Runs mpirun (or one child rank), relays the stop signals a user or scheduler sends us
// (stop_relay.h), and reads its stderr for the fallback account of which rank failed.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "host.h"
#include "process_tree.h"
#include "start_bound.h"
#include "stop_relay.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/errors.h"
#include "trainrun/launch/launch.h"
#include "trainrun/launch/mpirun_failure.h"
#include "trainrun/launch/supervisor.h"
#include "trainrun/runtime/failure_record.h"
#include "trainrun/runtime/host.h"

extern char** environ;

namespace trainrun {
namespace {

// mpirun's failure report comes last; a bounded tail keeps a chatty job from growing memory.
constexpr size_t kTailBytes = 256 * 1024;

void append_tail(std::string* tail, const char* data, size_t n) {
  tail->append(data, n);
  if (tail->size() > 2 * kTailBytes) tail->erase(0, tail->size() - kTailBytes);
}

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // our stderr is gone: keep supervising anyway
    data += w;
    n -= static_cast<size_t>(w);
  }
}

// Everything the child needs, built before fork: after fork only async-signal-safe calls.
// The pointers point into this object, so it is neither copied nor moved.
class ExecArgs {
 public:
  explicit ExecArgs(const LaunchPlan& plan) : exe(plan.argv[0]) {
    if (exe.find('/') == std::string::npos) exe = find_on_path(exe);
    if (exe.empty())
      throw LaunchError(
          fmt::format("{} is not on PATH: install openmpi-bin (apt-get install "
                      "openmpi-bin) or run ranks yourself with srun",
                      plan.argv[0]));
    for (const std::string& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (char** e = environ; e && *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      const size_t klen = eq ? static_cast<size_t>(eq - *e) + 1 : std::strlen(*e);
      bool overridden = false;
      for (const std::string& kv : plan.env) overridden |= kv.compare(0, klen, *e, klen) == 0;
      if (!overridden) env_store.emplace_back(*e);
    }
    env_store.insert(env_store.end(), plan.env.begin(), plan.env.end());
    for (std::string& kv : env_store) envp.push_back(kv.data());
    envp.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  std::string exe;
  std::vector<char*> argv, envp;

 private:
  std::vector<std::string> env_store;
};

// Blocks the relay's signals until the child's pid is known (unblock()), so that none is lost
// between fork and set_child; the destructor restores the mask in any case.
class BlockedSignals {
 public:
  BlockedSignals() { pthread_sigmask(SIG_BLOCK, &StopRelay::signals(), &old_mask_); }
  ~BlockedSignals() { unblock(); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;
  void unblock() const { pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr); }

 private:
  sigset_t old_mask_;
};

// The child's side of fork: async-signal-safe calls only.
[[noreturn]] void exec_child(const ExecArgs& args, int err_fd, pid_t parent,
                             const BlockedSignals& signals) {
  // Its own process group: a terminal's Ctrl-C reaches only us, and the relay decides what the
  // job sees (stop_relay.h). stdin from /dev/null, since a background process group reading
  // the terminal would be stopped.
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // if the launcher dies, so does the job
  if (getppid() != parent) _exit(127);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(err_fd, 2);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s)
    if (sigismember(&StopRelay::signals(), s) == 1) sigaction(s, &dfl, nullptr);
  signals.unblock();
  execve(args.exe.c_str(), args.argv.data(), args.envp.data());
  const char msg[] = "trainrun: cannot execute mpirun\n";
  write_all(2, msg, sizeof msg - 1);
  _exit(127);
}

// Bounds the teardown of a failed job. Open MPI tears a job down through its daemons, and a
// daemon on a host that went silent never answers: mpirun would wait until the link returns.
// Once a rank has recorded a failure (a stop is no failure: its ranks may be writing a
// checkpoint), mpirun gets `timeout` seconds to end; then it and its processes are killed. The
// ranks' records still decide the job's code; a checkpoint is never half written (temporary
// file + rename), so the kill loses nothing the restart needs. The ranks are in process groups
// of their own, so the kill follows mpirun's children (process_tree.h).
class TeardownDeadline {
 public:
  explicit TeardownDeadline(const LaunchPlan& plan)
      : run_dir_(plan.run_dir), timeout_(plan.teardown_timeout) {}

  // Called every ~200 ms while mpirun (pid, leader of its own process group) runs.
  void enforce(pid_t pid) {
    if (!expired()) return;
    fmt::print(stderr,
               "error: the job did not end within {:g} s of rank {} on {} failing ({}): killing "
               "mpirun and its processes on this host (Open MPI waits on a host that went "
               "silent; fault_tolerance.teardown_timeout)\n",
               timeout_, first_.rank, first_.host.empty() ? "an unknown host" : first_.host,
               first_.cause);
    kill_process_tree(pid, 5);
  }

 private:
  // True once (the first time the deadline has passed).
  bool expired() {
    if (run_dir_.empty() || timeout_ <= 0 || killed_) return false;
    const double t = now();
    if (failed_at_ < 0) {
      if (t - last_look_ < 1.0) return false;  // a directory scan a second is plenty
      last_look_ = t;
      for (const FailureRecord& r : read_failure_records(run_dir_)) {
        if (r.cause == "stopped") continue;
        failed_at_ = t;
        first_ = r;
        break;
      }
      return false;
    }
    if (t - failed_at_ < timeout_) return false;
    killed_ = true;
    return true;
  }
  std::string run_dir_;
  double timeout_;
  double failed_at_ = -1, last_look_ = -1e9;
  bool killed_ = false;
  FailureRecord first_;
};

// Passes the child's stderr through while keeping its tail; returns its wait status. Ranks
// could keep the pipe open after mpirun is gone, so EOF is not the end: the child exiting is.
// `tick` runs every ~200 ms until the child exits (the deadlines: they may kill it).
int pump_until_exit(pid_t pid, int err_fd, std::string* tail, const std::function<void()>& tick) {
  char buf[16384];
  int status = 0;
  bool exited = false;
  for (;;) {
    if (!exited) tick();
    pollfd pfd{err_fd, POLLIN, 0};
    int ready = poll(&pfd, 1, exited ? 0 : 200);
    if (ready > 0) {
      ssize_t n = read(err_fd, buf, sizeof buf);
      if (n > 0) {
        write_all(2, buf, static_cast<size_t>(n));
        append_tail(tail, buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;  // EOF or error
    }
    if (ready < 0 && errno == EINTR) continue;
    if (exited) break;  // drained what was left
    if (waitpid(pid, &status, WNOHANG) == pid) exited = true;
  }
  while (!exited) {  // stderr closed early: still wait under the deadline
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
    } else if (w < 0 && errno != EINTR) {
      break;
    } else {
      tick();
      poll(nullptr, 0, 200);
    }
  }
  return status;
}

// mpirun's account of the first rank to fail, or failing that what its exit status tells.
MpirunFailure explain(const LaunchPlan& plan, int status, int code, const std::string& tail) {
  if (plan.single_rank) {  // no mpirun: the child is rank 0, here
    MpirunFailure f{"", 0, host_name()};
    f.text = WIFSIGNALED(status) ? fmt::format("rank 0 on {} killed by signal {} ({})", f.host,
                                               WTERMSIG(status), strsignal(WTERMSIG(status)))
                                 : fmt::format("rank 0 on {} exited with code {}", f.host, code);
    return f;
  }
  MpirunFailure f = read_mpirun_failure(tail);
  if (!f.text.empty()) return f;
  // Open MPI 4.1 sometimes drops its report (its help-message aggregation races with job
  // teardown); its exit code still tells how the first rank ended.
  if (WIFSIGNALED(status))
    f.text = fmt::format("mpirun was killed by signal {} ({})", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
  else if (code > 128 && code < 128 + NSIG)
    f.text = fmt::format("a rank was killed by signal {} ({}); mpirun did not name it", code - 128,
                         strsignal(code - 128));
  else if (job_code(code) == code)
    f.text = fmt::format("a rank exited with code {}; mpirun did not name it", code);
  else
    f.text = fmt::format(
        "mpirun exited with code {} without naming a rank: Open MPI's own failure (a host lost "
        "or unreachable, a process it could not start; its messages are above)",
        code);
  return f;
}

}  // namespace

int run_launch(const LaunchPlan& plan, MpirunFailure* failure) {
  if (failure) *failure = {};
  if (plan.argv.empty()) throw std::invalid_argument("run_launch: empty command");
  const ExecArgs args(plan);
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0)
    throw LaunchError(fmt::format("cannot create a pipe for mpirun: {}", std::strerror(errno)));

  std::string tail;
  int status = 0;
  {
    const StopRelay relay;
    const BlockedSignals signals;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) exec_child(args, err_pipe[1], parent, signals);
    const int fork_errno = errno;
    if (pid > 0) StopRelay::set_child(pid, plan.single_rank ? SIGKILL : SIGTERM);
    signals.unblock();
    close(err_pipe[1]);
    if (pid < 0) {
      close(err_pipe[0]);
      throw LaunchError(
          fmt::format("cannot start mpirun: fork failed: {}", std::strerror(fork_errno)));
    }
    TeardownDeadline deadline(plan);
    StartBound start(plan);
    status = pump_until_exit(pid, err_pipe[0], &tail, [&] {
      start.enforce(pid);
      deadline.enforce(pid);
    });
    StopRelay::set_child(0, SIGTERM);
    // mpirun that ended by itself with 0 ran every rank to its end: a stop that came after
    // they finished, between two looks for a heartbeat (a rank removes its own at its end),
    // found nothing left to stop, and the run is done.
    const bool finished =
        !start.killed() && !start.timed_out() && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (start.ended() && !finished) {  // mpirun started no rank: its own code means nothing
      close(err_pipe[0]);
      if (failure) {
        failure->text = start.why();
        failure->not_launched = start.timed_out();
      }
      return start.code();
    }
  }
  close(err_pipe[0]);

  int code = kExitFailure;
  if (WIFEXITED(status))
    code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    code = 128 + WTERMSIG(status);
  if (failure && code != 0) *failure = explain(plan, status, code, tail);
  return code;
}

int run_launch(const LaunchPlan& plan, std::string* failure) {
  MpirunFailure f;
  const int code = run_launch(plan, &f);
  if (failure) *failure = f.text;
  return code;
}

}  // namespace trainrun
