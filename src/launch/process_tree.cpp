// Walking /proc for a process's descendants, and ending them all.
#include "process_tree.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace trainrun {
namespace {

// The parent and state of `pid` from /proc/PID/stat ("PID (COMM) STATE PPID ..."; COMM may
// hold spaces and parentheses, so the fields are read after the last ')'). False when gone.
bool read_stat(pid_t pid, pid_t* ppid, char* state) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  long parent = 0;
  if (!(rest >> *state >> parent)) return false;
  *ppid = static_cast<pid_t>(parent);
  return true;
}

std::multimap<pid_t, pid_t> children_by_parent() {
  std::multimap<pid_t, pid_t> children;
  DIR* proc = opendir("/proc");
  if (!proc) return children;
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    pid_t ppid = 0;
    char state = 0;
    if (read_stat(static_cast<pid_t>(pid), &ppid, &state))
      children.emplace(ppid, static_cast<pid_t>(pid));
  }
  closedir(proc);
  return children;
}

bool gone(pid_t pid) {
  pid_t ppid = 0;
  char state = 0;
  return !read_stat(pid, &ppid, &state) || state == 'Z' || state == 'X';
}

}  // namespace

std::vector<pid_t> descendants(pid_t root) {
  const std::multimap<pid_t, pid_t> children = children_by_parent();
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      if (std::find(out.begin(), out.end(), it->second) != out.end()) continue;
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

std::vector<pid_t> kill_process_tree(pid_t root, double wait_s) {
  // Frozen first: a stopped process cannot start another, so a scan after the last stop that
  // finds nobody new has them all.
  kill(root, SIGSTOP);
  std::vector<pid_t> all = {root};
  for (;;) {
    bool found = false;
    for (pid_t p : descendants(root)) {
      if (std::find(all.begin(), all.end(), p) != all.end()) continue;
      kill(p, SIGSTOP);
      all.push_back(p);
      found = true;
    }
    if (!found) break;
  }
  kill(-root, SIGKILL);  // its group: anything of the job we could not see a parent link for
  for (pid_t p : all) kill(p, SIGKILL);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  std::vector<pid_t> left = all;
  for (;;) {
    left.erase(std::remove_if(left.begin(), left.end(), gone), left.end());
    if (left.empty() || std::chrono::steady_clock::now() >= until) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace trainrun
