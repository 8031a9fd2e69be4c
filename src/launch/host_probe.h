// Internal to src/launch: after a job hung on several hosts, which hosts still answer. Inside the
// job a lost link looks the same from both sides (every rank alive, every rank waiting in the
// same allreduce, every heartbeat fresh on a shared file system), so the watchdog cannot say
// which host is cut off; the launcher can, by asking each host over the remote shell mpirun
// itself uses.
#pragma once

#include <string>
#include <vector>

namespace trainrun {

// The hosts (of `hosts`) that did not run `true` over mpirun's remote shell
// (OMPI_MCA_plm_rsh_agent, else ssh; BatchMode and a connect timeout added for ssh) within
// `timeout_s`. All are asked at once; this host (host_name(), localhost) is skipped.
std::vector<std::string> unreachable_hosts(const std::vector<std::string>& hosts, double timeout_s);

}  // namespace trainrun
