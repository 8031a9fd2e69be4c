#include "trainrun/sweep/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "sweep_file.h"
#include "sweep_points.h"
#include "trainrun/cluster/cluster.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/hf/hf_import.h"
#include "trainrun/launch/launch.h"
#include "trainrun/obs/provenance.h"
#include "trainrun/obs/tb_hparams.h"
#include "trainrun/preflight/preflight.h"
#include "trainrun/report/sweep_manifest.h"

extern char** environ;

namespace fs = std::filesystem;

namespace trainrun {

namespace {

// Every point's config, checked as its run will check it (every rule, and whether it fits the
// device), before anything runs; two points that resolve to one config are refused.
std::vector<Experiment> validate_points(const SweepManifest& m,
                                        const std::vector<const SweepPoint*>& points) {
  std::vector<Experiment> out;
  std::map<std::string, std::string> seen;  // resolved config -> the point that has it
  for (const SweepPoint* p : points) {
    std::vector<std::string> overrides = m.sets;
    overrides.insert(overrides.end(), p->overrides.begin(), p->overrides.end());
    std::string where = p->name;
    for (const std::string& o : p->overrides) {
      where += where == p->name ? " (" : ", ";
      where += o;
    }
    if (!p->overrides.empty()) where += ")";
    try {
      const Experiment exp = load_experiment(m.config, overrides, hf_model_source);
      check_memory(exp);
      const auto [it, fresh] = seen.emplace(to_yaml(exp), p->name);
      if (!fresh)
        throw ConfigError(
            fmt::format("it trains the same config as point {}: the axes give "
                        "two identical points; drop the repeated value",
                        it->second));
      out.push_back(exp);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("sweep point {}: {}", where, e.what()));
    }
  }
  return out;
}

// `--slurm`: one sbatch job array, task i training point todo[i] as `trainrun slurm` trains one
// run (srun, the warning signal, requeue on 75), at most `parallel` at once; written to
// SWEEP_DIR/sweep.sbatch and with `submit` submitted. Every task shares one shape, so the
// points must agree on distributed.nodes and nproc. The manifest is not theirs to write: the
// tasks' runs record how they ended (provenance), and compare, runs and `sweep --resume` read
// it there.
SlurmOptions array_options(const SweepManifest& m, const std::vector<size_t>& todo,
                           const std::vector<Experiment>& exps, const fs::path& dir, int parallel) {
  for (size_t i = 1; i < exps.size(); ++i)
    if (exps[i].distributed.nodes != exps[0].distributed.nodes ||
        exps[i].distributed.nproc != exps[0].distributed.nproc)
      throw ConfigError(fmt::format(
          "sweep --slurm: one job array has one shape, but point {} has {} node(s) x {} rank(s) "
          "and point {} {} x {}; sweep distributed.nodes and nproc in separate sweeps",
          m.points[todo[0]].name, exps[0].distributed.nodes, exps[0].distributed.nproc,
          m.points[todo[i]].name, exps[i].distributed.nodes, exps[i].distributed.nproc));
  const fs::path abs = fs::absolute(dir).lexically_normal();
  SlurmOptions o;
  o.trainrun_bin = self_executable();
  o.config_path = m.config;
  o.sets = m.sets;
  o.job_name = abs.filename().string();
  o.output = (abs / "logs" / "slurm-%A_%a.out").string();
  o.array_throttle = parallel;
  for (size_t i : todo)
    o.array.push_back({(abs / m.points[i].name).string(), m.points[i].overrides});
  return o;
}

// The exclusive lock of a sweep directory, held while the sweep process lives (the kernel drops
// it however the process ends).
class SweepLock {
 public:
  explicit SweepLock(const fs::path& dir) {
    const std::string path = (dir / ".sweep.lock").string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(kExitRunDir, fmt::format("sweep directory {}: cannot create {}: {}", dir.string(),
                                           path, std::strerror(errno)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[128] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      throw Error(
          kExitRunDir,
          fmt::format("sweep directory {} is in use by another sweep process ({}); wait "
                      "for it, or stop it",
                      dir.string(), n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?"));
    }
    const std::string who = fmt::format("pid {}", ::getpid());
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) < 0) {
      // The lock holds without its note; only a message would lack the pid.
    }
  }
  ~SweepLock() { ::close(fd_); }
  SweepLock(const SweepLock&) = delete;
  SweepLock& operator=(const SweepLock&) = delete;

 private:
  int fd_ = -1;
};

// A new sweep's directory: missing or empty, else refused (exit 73) with what it holds.
void check_new_sweep_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec))
    throw Error(kExitRunDir, fmt::format("--sweep-dir {} is not a directory", dir.string()));
  if (is_sweep_dir(dir.string())) {
    const SweepManifest m = read_sweep_manifest(dir.string());
    throw Error(kExitRunDir,
                fmt::format("sweep directory {} holds a sweep of {} points ({} {}); continue it "
                            "with `trainrun sweep --resume {}`, or give another --sweep-dir",
                            dir.string(), m.points.size(), m.config, m.axes, dir.string()));
  }
  if (fs::directory_iterator(dir, ec) != fs::directory_iterator())
    throw Error(kExitRunDir, fmt::format("sweep directory {} holds other files; give a new or "
                                         "empty --sweep-dir",
                                         dir.string()));
}

// One point's run: `trainrun run CONFIG --set ... --run-dir SWEEP/NAME --resume`, which starts
// the run, or continues it from its newest checkpoint when it has one (a preempted or failed
// attempt). Its own process group, so that a terminal's Ctrl-C reaches the sweep alone, which
// passes it on; its output appended to SWEEP/logs/NAME.log.
pid_t start_point(const SweepManifest& m, const SweepPoint& p, const fs::path& dir,
                  int omp_threads) {
  std::vector<std::string> args{self_executable(), "run", m.config};
  for (const auto* list : {&m.sets, &p.overrides})
    for (const std::string& kv : *list) args.insert(args.end(), {"--set", kv});
  args.insert(args.end(), {"--run-dir", (dir / p.name).string(), "--resume"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  if (omp_threads > 0 && !std::getenv("OMP_NUM_THREADS"))
    env.push_back(fmt::format("OMP_NUM_THREADS={}", omp_threads));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  const std::string log = (dir / "logs" / (p.name + ".log")).string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGCHLD}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    throw Error(kExitLaunch, fmt::format("sweep point {}: cannot start {}: {}", p.name, argv[0],
                                         std::strerror(rc)));
  return pid;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TensorBoard's HParams records (obs/tb_hparams.h): the experiment at the sweep directory, its
// axes and the values each takes, and the metrics to show.
void write_hparams_experiment(const SweepManifest& m, const fs::path& dir) {
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> domains;
  for (const SweepPoint& p : m.points)
    for (const std::string& kv : p.overrides) {
      const size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
      const size_t i =
          static_cast<size_t>(std::find(names.begin(), names.end(), key) - names.begin());
      if (i == names.size()) names.push_back(key), domains.emplace_back();
      if (std::find(domains[i].begin(), domains[i].end(), value) == domains[i].end())
        domains[i].push_back(value);
    }
  const double now = unix_now();
  tb::write_hparams_file(
      dir.string(),
      {tb::hparams_experiment_event(
          now, names, domains,
          {{"train/loss", true}, {"train/tokens_per_sec", true}, {"eval/val_loss", false}},
          fmt::format("trainrun sweep {} {}", m.config, m.axes))},
      now);
}

// A point's session, in its run directory: its values, and its group (the values but the
// seed, so TensorBoard groups a setting's seeds); with an end status once it ended.
void write_hparams_session(const SweepPoint& p, const fs::path& run_dir, double started,
                           std::optional<tb::SessionStatus> ended) {
  tb::HParams hparams;
  std::string group;
  for (const std::string& kv : p.overrides) {
    const size_t eq = kv.find('=');
    hparams.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    if (kv.rfind("seed=", 0) == 0) continue;
    if (!group.empty()) group += ',';
    group += kv;
  }
  const double now = unix_now();
  std::vector<std::string> events{tb::hparams_session_start_event(now, hparams, group, started)};
  if (ended) events.push_back(tb::hparams_session_end_event(now, *ended, now));
  tb::write_hparams_file(run_dir.string(), events, now);
}

tb::SessionStatus session_status(PointStatus s) {
  return s == PointStatus::done     ? tb::SessionStatus::success
         : s == PointStatus::failed ? tb::SessionStatus::failure
                                    : tb::SessionStatus::unknown;
}

// The manifest brought up to date from each point's own provenance record: a point another
// process trained (a Slurm array task, or a sweep process that was killed) ended as its run
// says. Returns the points it changed. (A point whose run is going on now is not run twice: its
// run directory's lock refuses a second run, exit 73.)
std::vector<size_t> reconcile(SweepManifest& m, const fs::path& dir) {
  std::vector<size_t> changed;
  for (size_t i = 0; i < m.points.size(); ++i) {
    SweepPoint& p = m.points[i];
    if (p.status == PointStatus::done) continue;
    const fs::path run = dir / p.name;
    const auto record = read_provenance(run.string());
    if (!record || record->attempts.empty()) continue;
    const ProvenanceAttempt& last = record->attempts.back();
    if (last.exit_code &&
        (p.status != status_of_exit(*last.exit_code) || p.exit_code != *last.exit_code)) {
      p.status = status_of_exit(*last.exit_code);
      p.exit_code = *last.exit_code;
      changed.push_back(i);
    }
  }
  return changed;
}

// Runs `todo` (indices into m.points; exps[k] is todo[k]'s experiment), at most `parallel` at
// once, keeping the manifest current.
// Returns the signal that stopped the sweep, or 0.
int run_points(SweepManifest& m, const std::vector<size_t>& todo,
               const std::vector<Experiment>& exps, const fs::path& dir, int parallel) {
  sigset_t stops;
  sigemptyset(&stops);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGCHLD}) sigaddset(&stops, s);
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &stops, &old);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Side by side, each point's ranks get their share of the cores (a lone point: trainrun's
  // own default, cores over its ranks).
  auto omp_threads = [&](size_t k) {
    return parallel > 1 ? std::max(1, cores / (parallel * std::max(1, exps[k].distributed.nproc)))
                        : 0;
  };
  std::map<pid_t, size_t> active;
  std::map<size_t, std::chrono::steady_clock::time_point> started;
  std::map<size_t, double> started_unix;
  size_t next = 0, finished = 0;
  int stop_signal = 0;
  while (true) {
    while (stop_signal == 0 && active.size() < static_cast<size_t>(parallel) &&
           next < todo.size()) {
      SweepPoint& p = m.points[todo[next]];
      p.status = PointStatus::running;
      ++p.attempts;
      write_sweep_manifest(dir.string(), m);
      // The run directory holds the session before the run starts in it: a name it owns.
      std::error_code ec;
      fs::create_directories(dir / p.name, ec);
      started_unix[todo[next]] = unix_now();
      write_hparams_session(p, dir / p.name, started_unix[todo[next]], std::nullopt);
      active[start_point(m, p, dir, omp_threads(next))] = todo[next];
      started[todo[next]] = std::chrono::steady_clock::now();
      fmt::print("[{}/{}] {}: started\n", next + 1, todo.size(), p.name);
      std::fflush(stdout);
      ++next;
    }
    if (active.empty()) break;
    const timespec wait{0, 200'000'000};
    const int sig = sigtimedwait(&stops, nullptr, &wait);
    if (sig > 0 && sig != SIGCHLD && stop_signal == 0) {
      stop_signal = sig;
      fmt::print("sweep: {} received: passing it to {} running point(s), starting no more\n",
                 strsignal(sig), active.size());
      std::fflush(stdout);
      for (const auto& [pid, i] : active) ::kill(-pid, sig);
    }
    int wstatus = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &wstatus, WNOHANG)) > 0) {
      const auto it = active.find(pid);
      if (it == active.end()) continue;
      const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
      SweepPoint& p = m.points[it->second];
      p.exit_code = code;
      p.status = status_of_exit(code);
      write_sweep_manifest(dir.string(), m);
      write_hparams_session(p, dir / p.name, started_unix[it->second], session_status(p.status));
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started[it->second])
              .count();
      fmt::print(
          "[{} of {} ended] {}: {} (exit {}) after {:.1f} s{}\n", ++finished, todo.size(), p.name,
          enum_name(p.status), code, secs,
          code == 0 ? "" : fmt::format("; its output: {}/logs/{}.log", dir.string(), p.name));
      std::fflush(stdout);
      active.erase(it);
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return stop_signal;
}

}  // namespace

int run_sweep(const SweepRequest& r) {
  SweepManifest m;
  fs::path dir;
  if (!r.resume.empty()) {
    if (!r.config.empty() || !r.sets.empty() || !r.grid.empty() || !r.random.empty() ||
        r.seeds > 0 || r.list || r.trials > 0 || !r.sweep_dir.empty() || !r.sweep_file.empty())
      throw ConfigError(
          "sweep --resume SWEEP_DIR continues the sweep its manifest describes: give no CONFIG, "
          "--set, axes or --sweep-dir with it (start a new sweep for other points)");
    dir = r.resume;
    if (!is_sweep_dir(dir.string()))
      throw Error(kExitRunDir, fmt::format("sweep --resume {}: no sweep there (no {}); start "
                                           "one with `trainrun sweep CONFIG --grid ...`",
                                           dir.string(), kSweepManifestFile));
    m = read_sweep_manifest(dir.string());
  } else {
    if (r.config.empty()) throw ConfigError("sweep: give CONFIG.yaml (or --resume SWEEP_DIR)");
    sweep::Axes axes{{}, r.grid, r.list, r.random, r.trials, r.sweep_seed, r.seeds};
    std::vector<std::string> sets = r.sets;
    if (!r.sweep_file.empty()) sweep::read_sweep_file(r.sweep_file, axes, sets);
    const Experiment base = load_experiment(r.config, sets, hf_model_source);
    m.config = fs::absolute(r.config).lexically_normal().string();
    m.sets = sets;
    m.axes = sweep::describe(axes);
    for (sweep::Point& p : sweep::expand(axes, base.seed))
      m.points.push_back({std::move(p.name), std::move(p.overrides)});
    dir = r.sweep_dir.empty() ? fs::path("runs") / (base.name + "-sweep") : fs::path(r.sweep_dir);
  }
  const std::vector<size_t> reconciled =
      r.resume.empty() ? std::vector<size_t>{} : reconcile(m, dir);
  std::vector<const SweepPoint*> todo_points;
  std::vector<size_t> todo;
  for (size_t i = 0; i < m.points.size(); ++i)
    if (m.points[i].status != PointStatus::done) {
      todo.push_back(i);
      todo_points.push_back(&m.points[i]);
    }
  const std::vector<Experiment> exps = validate_points(m, todo_points);
  if (r.parallel < 1) throw ConfigError("sweep --parallel: at least 1");
  if (r.submit && !r.slurm) throw ConfigError("sweep --submit: with --slurm (the job array)");
  std::string script;
  if (r.slurm && !todo.empty()) {
    // Everything that can refuse before anything is written: the script, and sbatch itself.
    script = slurm_script(exps.front(), array_options(m, todo, exps, dir, r.parallel));
    if (r.submit && !r.dry_run)
      require_sbatch("`trainrun sweep --slurm` without --submit writes the script");
  }

  if (r.dry_run) {
    fmt::print("sweep {} ({} points, {} to run): {} {}\n", dir.string(), m.points.size(),
               todo.size(), m.config, m.axes);
    for (const SweepPoint& p : m.points) {
      std::string o;
      for (const std::string& kv : p.overrides) o += " " + kv;
      fmt::print("  {}  [{}]{}\n", p.name, enum_name(p.status), o);
    }
    return kExitOk;
  }
  if (r.resume.empty()) check_new_sweep_dir(dir);
  std::error_code ec;
  fs::create_directories(dir / "logs", ec);
  if (ec)
    throw Error(kExitRunDir, fmt::format("sweep directory {}: cannot create it: {}", dir.string(),
                                         ec.message()));
  const SweepLock lock(dir);
  write_sweep_manifest(dir.string(), m);
  write_hparams_experiment(m, dir);
  for (size_t i : reconciled)
    write_hparams_session(m.points[i], dir / m.points[i].name, unix_now(),
                          session_status(m.points[i].status));
  if (r.slurm) {
    if (todo.empty()) {
      fmt::print("sweep {}: every point is done\n", dir.string());
      return kExitOk;
    }
    const std::string path = (dir / "sweep.sbatch").string();
    replace_file(path, script);
    if (!r.submit) {
      fmt::print("sweep {}: {} points as one job array in {}; submit it with `sbatch {}`\n",
                 dir.string(), todo.size(), path, path);
      return kExitOk;
    }
    const std::string job = sbatch_submit(path);
    fmt::print(
        "sweep {}: submitted job array {} ({} points, {} at a time); `trainrun compare "
        "{}` shows them, `trainrun sweep --resume {}` runs what did not finish\n{}\n",
        dir.string(), job, todo.size(), r.parallel, dir.string(), dir.string(), job);
    return kExitOk;
  }
  fmt::print("sweep {}: {} of {} points to run, {} at a time\n", dir.string(), todo.size(),
             m.points.size(), r.parallel);
  std::fflush(stdout);
  const int stopped = run_points(m, todo, exps, dir, r.parallel);

  std::map<PointStatus, int> count;
  int first_failure = 0;
  for (const SweepPoint& p : m.points) {
    ++count[p.status];
    if (p.status == PointStatus::failed && first_failure == 0) first_failure = p.exit_code;
  }
  fmt::print(
      "sweep {}: {} done, {} failed, {} preempted, {} pending; compare them with "
      "`trainrun compare {}`{}\n",
      dir.string(), count[PointStatus::done], count[PointStatus::failed],
      count[PointStatus::preempted], count[PointStatus::pending], dir.string(),
      count[PointStatus::done] == static_cast<int>(m.points.size())
          ? ""
          : fmt::format("; run the rest with `trainrun sweep --resume {}`", dir.string()));
  if (stopped) return stopped == SIGINT ? kExitInterrupted : kExitResumeMe;
  return first_failure;
}

}  // namespace trainrun
