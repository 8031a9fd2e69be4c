#include "run_provenance.h"

#include <ctime>

#include <fmt/format.h>

#include "host.h"
#include "trainrun/config/config.h"
#include "trainrun/core/build_info.h"
#include "trainrun/core/errors.h"
#include "trainrun/runtime/host.h"

namespace trainrun {

namespace {

// Where the job's ranks run, as far as the owner knows: the hostfile's hosts, Slurm's node list,
// or this host.
std::vector<std::string> job_hosts(const Experiment& exp) {
  if (!exp.distributed.hostfile.empty()) {
    try {
      return hostfile_hosts(exp.distributed.hostfile);
    } catch (const Error&) {
      // The launch plan reports an unreadable hostfile; here it only names fewer hosts.
    }
  }
  if (const char* nodes = std::getenv("SLURM_JOB_NODELIST"); nodes && *nodes) return {nodes};
  return {host_name()};
}

std::string now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", &tm);
  return buf;
}

}  // namespace

AttemptRecord::AttemptRecord(const Experiment& exp) : run_dir_(exp.run_dir) {
  try {
    Provenance p = read_provenance(run_dir_).value_or(Provenance{});
    // The experiment, not where it runs: one config trained in two directories has one hash.
    Experiment what = exp;
    what.run_dir.clear();
    p.attempts.push_back({trainrun_version(), std::string(source_commit()),
                          config_hash(to_yaml(what)), own_arguments(), job_hosts(exp), now(), "",
                          std::nullopt});
    write_provenance(run_dir_, p);
    record_ = std::move(p);
  } catch (const Error& e) {
    fmt::print(stderr, "warning: the run's provenance record was not written: {}\n", e.what());
  }
}

void AttemptRecord::end(int exit_code) {
  if (!record_ || record_->attempts.back().exit_code) return;
  record_->attempts.back().ended = now();
  record_->attempts.back().exit_code = exit_code;
  try {
    write_provenance(run_dir_, *record_);
  } catch (const Error& e) {
    fmt::print(stderr, "warning: the run's provenance record was not ended: {}\n", e.what());
  }
}

}  // namespace trainrun
