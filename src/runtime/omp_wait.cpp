// The OpenMP wait policy: chosen from the config and the environment, passed to ranks by the
// launcher, and applied to a training process by re-executing it (omp_wait.h).
#include "trainrun/runtime/omp_wait.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trainrun/core/errors.h"
#include "trainrun/runtime/host.h"

namespace trainrun {
namespace {

constexpr const char* kUserVariables[] = {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"};

bool set_by_user(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// execv("/proc/self/exe") below names the new process "exe": the kernel takes a process's name
// (ps, top, pgrep and pkill read it) from the file executed, not from argv[0]. So a re-executed
// process names itself from argv[0] again, as a plain start from the shell would have.
void restore_name_after_reexec() {
  std::ifstream in("/proc/self/comm");
  std::string comm;
  if (!std::getline(in, comm) || comm != "exe") return;
  const std::vector<std::string> args = own_arguments();
  if (args.empty()) return;
  const std::string name = std::filesystem::path(args[0]).filename().string();
  if (!name.empty()) prctl(PR_SET_NAME, name.c_str());  // the kernel keeps 15 bytes
}

// The spin count trainrun must set, or nothing (the user's environment, or libgomp's default).
std::optional<int64_t> spin_to_set(const Experiment& exp) {
  for (const char* name : kUserVariables)
    if (set_by_user(name)) return std::nullopt;
  if (exp.train.omp_spincount < 0) return std::nullopt;
  return exp.train.omp_spincount;
}

}  // namespace

std::optional<std::string> omp_wait_setting(const Experiment& exp) {
  if (auto spin = spin_to_set(exp)) return fmt::format("GOMP_SPINCOUNT={}", *spin);
  return std::nullopt;
}

std::vector<std::string> omp_wait_mpirun_args(const Experiment& exp) {
  std::vector<std::string> args;
  for (const char* name : kUserVariables)
    if (set_by_user(name)) args.insert(args.end(), {"-x", name});
  if (auto s = omp_wait_setting(exp)) args.insert(args.end(), {"-x", *s});
  return args;
}

void ensure_omp_wait_policy(const Experiment& exp) {
  const auto spin = spin_to_set(exp);
  if (!spin) {  // the environment already holds what libgomp read: perhaps set by us, below
    restore_name_after_reexec();
    return;
  }
  const std::string value = std::to_string(*spin);
  const std::vector<std::string> args = own_arguments();
  if (args.empty()) return;  // no /proc: train with libgomp's default rather than not at all
  setenv("GOMP_SPINCOUNT", value.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv.data());
  // Could not re-execute: train anyway, and say what it costs.
  fmt::print(stderr,
             "warning: could not re-execute with GOMP_SPINCOUNT={} ({}): OpenMP threads spin "
             "with libgomp's default, which is slow when cores are shared; set GOMP_SPINCOUNT "
             "in the environment\n",
             value, std::strerror(errno));
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace trainrun
