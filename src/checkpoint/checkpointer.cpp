// Checkpointer: saves a run's checkpoints (in the caller's thread or in one persistent writer
// thread) and prunes old ones, never deleting the newest good checkpoint before a newer one
// exists. A non-finite snapshot is refused before any of that. Every rank's Checkpointer writes
// its file; rank 0's also commits (checkpoint.h) and prunes.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "checkpoint_dir.h"
#include "checkpoint_folder.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/thread_annotations.h"

namespace trainrun {
namespace fs = std::filesystem;

struct Checkpointer::Impl {
  // How long rank 0 waits for the other ranks' files. A background commit waits for writes
  // that began when its own did, so this bounds a write, not a rank's lag; without async the
  // files exist already and it covers a shared file system's delay in showing them.
  static constexpr double kAsyncCommitTimeout = 1800, kCommitTimeout = 60;

  std::string run_dir;
  int keep_last;
  bool async;
  int rank = 0;

  // The trainer's thread, the writer and the watch share what is GUARDED_BY(mu); `verified`
  // and `known_bad` belong to whichever thread writes (the writer when async, else the trainer).
  Mutex mu;
  CondVar cv;
  std::optional<RankSnapshot> pending GUARDED_BY(mu);
  bool busy GUARDED_BY(mu) = false;  // the writer holds a snapshot
  bool stop GUARDED_BY(mu) = false;
  std::exception_ptr error GUARDED_BY(mu);
  std::thread writer;
  // The written snapshot's buffer, kept for reuse.
  RankSnapshot spare GUARDED_BY(mu);

  void keep(RankSnapshot&& s) EXCLUDES(mu) {
    MutexLock lock(mu);
    spare = std::move(s);
  }

  // Files known to verify: written by us, or verified once. Keyed by size and mtime so a file
  // changed since is checked again; pruning must not re-read gigabytes on every save.
  using FileKey = std::pair<uintmax_t, fs::file_time_type>;
  std::map<std::string, FileKey> verified;
  std::set<std::string> known_bad;

  // A folder checkpoint is keyed by all its files: a rank file changed after the commit is damage.
  static std::optional<FileKey> key_of(const std::string& checkpoint) {
    std::error_code ec1, ec2;
    if (!fs::is_directory(checkpoint, ec1)) {
      FileKey key{fs::file_size(checkpoint, ec1), fs::last_write_time(checkpoint, ec2)};
      if (ec1 || ec2) return std::nullopt;
      return key;
    }
    // A folder: every file in it (a rank's file changed after the commit is damage too).
    FileKey key{0, fs::file_time_type::min()};
    for (const auto& e : fs::directory_iterator(checkpoint, ec1)) {
      key.first += e.is_regular_file(ec2) ? e.file_size(ec2) : 0;
      key.second = std::max(key.second, e.last_write_time(ec2));
      if (ec2) return std::nullopt;
    }
    if (ec1) return std::nullopt;
    return key;
  }

  bool is_good(const std::string& path) {
    std::optional<FileKey> key = key_of(path);
    if (!key) return false;
    auto it = verified.find(path);
    if (it != verified.end() && it->second == *key) return true;
    Verdict v = verify_checkpoint(path);
    if (v.ok)
      verified[path] = *key;
    else if (known_bad.insert(path).second)
      spdlog::warn("checkpoint {} is {} ({})", path, v.problem(), v.reason);
    return v.ok;
  }

  // Keeps the newest keep_last good checkpoints (all when keep_last <= 0). Damaged files
  // older than the newest good one are deleted too (nothing would ever resume from them), but
  // only when they are recognisably trainrun's: a stranger's file is never ours to delete.
  void prune() {
    if (keep_last <= 0) return;
    int good_seen = 0;
    int64_t oldest_kept = -1;
    for (const std::string& path : list_checkpoints(run_dir)) {
      bool good = is_good(path);
      if (good && good_seen < keep_last) {
        ++good_seen;
        oldest_kept = step_of_checkpoint(path);
        continue;
      }
      if (good_seen == 0) continue;  // a damaged file newer than every good one: leave it
      if (!good && !is_trainrun_checkpoint(path)) continue;
      std::error_code ec;
      if (remove_checkpoint(path, ec))
        spdlog::debug("pruned checkpoint {}", path);
      else if (ec)
        spdlog::warn("cannot remove old checkpoint {}: {}", path, ec.message());
      verified.erase(path);
    }
    // Saves that never committed, older than a kept checkpoint: never resumable.
    for (const auto& [step, dir] : unfinished_checkpoints(run_dir)) {
      std::error_code ec;
      if (step < oldest_kept && remove_checkpoint(dir, ec))
        spdlog::info("removed {}, a save that never finished", dir);
    }
  }

  void write(const RankSnapshot& snap) {
    const TrainState s = snap.summary();  // save() checked it is complete, and finite
    write_rank_file(checkpoint_path(run_dir, s.step), snap);
    if (async && rank == 0) commit_and_prune(s.step, s.world_size, kAsyncCommitTimeout);
  }

  void commit_and_prune(int64_t step, int world, double timeout) {
    const std::string dir = checkpoint_path(run_dir, step);
    commit_folder(dir, step, world, timeout);
    verified.erase(dir);
    if (std::optional<FileKey> key = key_of(dir)) verified[dir] = *key;
    known_bad.erase(dir);
    prune();
  }

  // The writer yields to training: as SCHED_IDLE it runs only on a core no other thread wants
  // (an OpenMP thread waiting at a barrier, the data loader, an allreduce), and a waking OpenMP
  // thread takes the core back at once, instead of losing it mid-kernel and stalling the whole
  // team at its next barrier. But on a node whose cores other processes keep busy, SCHED_IDLE
  // gets almost no CPU at all, and a save could take hours. So a write is bounded: once it is
  // late (kPromoteAfter seconds, or the trainer waiting for it: the next save is due, or the
  // run ends) the writer is raised to the normal policy until that write is done. Raising a
  // thread out of SCHED_IDLE needs CAP_SYS_NICE or an RLIMIT_NICE of 20 (sched(7)); where the
  // process has neither, the writer is SCHED_BATCH instead: a normal share of the CPU, never
  // starved, only slower to take a core from a waking thread.
  static constexpr double kPromoteAfter = 30;

  // Whether this process may raise a thread from SCHED_IDLE back to normal: tried on a thread
  // of its own, the only way to know without parsing capabilities and limits.
  static bool can_leave_idle() {
    bool ok = false;
    std::thread([&ok] {
      sched_param p{};
      ok = ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &p) == 0 &&
           ::pthread_setschedparam(::pthread_self(), SCHED_OTHER, &p) == 0;
    }).join();
    return ok;
  }

  bool idle_policy = false;  // SCHED_IDLE between writes (else SCHED_BATCH); set before writer
  bool raised GUARDED_BY(mu) = false;       // the current write runs at the normal policy
  bool said_raised GUARDED_BY(mu) = false;  // the info line, once per run
  int64_t writes_started GUARDED_BY(mu) = 0;
  std::thread watch;  // raises a write that passes kPromoteAfter

  void lower_self() {
    sched_param p{};
    if (::pthread_setschedparam(::pthread_self(), idle_policy ? SCHED_IDLE : SCHED_BATCH, &p) != 0)
      spdlog::debug("checkpoint writer keeps its priority: {}", std::strerror(errno));
  }

  // Raises the writer for the rest of its current write.
  void raise_writer(const char* why) REQUIRES(mu) {
    if (!busy || raised || !idle_policy) return;
    sched_param p{};
    const int err = ::pthread_setschedparam(writer.native_handle(), SCHED_OTHER, &p);
    if (err != 0) {
      spdlog::debug("checkpoint writer cannot be raised: {}", std::strerror(err));
      return;
    }
    raised = true;
    if (!std::exchange(said_raised, true))
      spdlog::info(
          "checkpoint writer raised to normal priority: {} (the cores are busy; said once)", why);
  }

  void watch_loop() {
    ::pthread_setname_np(::pthread_self(), "ckpt-watch");
    MutexLock lock(mu);
    while (!stop) {
      while (!stop && !(busy && !raised)) cv.wait(mu);
      if (stop) return;
      const int64_t write = writes_started;
      const auto late = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(kPromoteAfter));
      bool timed_out = false;
      while (!stop && busy && writes_started == write && !timed_out)
        timed_out = !cv.wait_until(mu, late) && std::chrono::steady_clock::now() >= late;
      if (timed_out) raise_writer("a save took longer than 30 s");
      while (!stop && busy && writes_started == write) cv.wait(mu);
    }
  }

  void writer_loop() {
    ::pthread_setname_np(::pthread_self(), "ckpt-writer");  // ps, top, /proc/PID/task/*/comm
    mu.lock();
    lower_self();
    for (;;) {
      while (!stop && !pending.has_value()) cv.wait(mu);
      if (!pending) break;  // stop requested and nothing left to write
      RankSnapshot data = std::move(*pending);
      pending.reset();
      ++writes_started;
      cv.notify_all();  // the watch starts its clock
      mu.unlock();
      std::exception_ptr err;
      try {
        write(data);
      } catch (...) {
        err = std::current_exception();
      }
      keep(std::move(data));
      mu.lock();
      if (err && !error) error = err;
      busy = false;
      if (std::exchange(raised, false)) lower_self();  // the next write starts yielding again
      cv.notify_all();
    }
    mu.unlock();
  }

  // Writes in the caller's thread, or hands the snapshot to the writer once it is idle.
  void enqueue(RankSnapshot&& data) {
    if (!async) {
      write(data);
      keep(std::move(data));
      return;
    }
    if (std::exception_ptr err = drain()) std::rethrow_exception(err);
    {
      MutexLock lock(mu);
      pending.emplace(std::move(data));
      busy = true;
    }
    cv.notify_all();
  }

  // Waits until the writer is idle; returns (and clears) its error, if any.
  std::exception_ptr drain() EXCLUDES(mu) {
    MutexLock lock(mu);
    raise_writer("training waits for the previous save");
    while (busy) cv.wait(mu);
    return std::exchange(error, nullptr);
  }
};

Checkpointer::Checkpointer(std::string run_dir, int keep_last, bool async, int rank)
    : impl_(std::make_unique<Impl>()) {
  impl_->run_dir = std::move(run_dir);
  impl_->keep_last = keep_last;
  impl_->async = async;
  impl_->rank = rank;
  // Before any rank of this job writes: the one time a shard's temporary is known stale.
  if (rank == 0) remove_stale_temp_files(impl_->run_dir, /*step_folders=*/true);
  if (async) {
    impl_->idle_policy = Impl::can_leave_idle();
    impl_->writer = std::thread([this] { impl_->writer_loop(); });
    impl_->watch = std::thread([this] { impl_->watch_loop(); });
  }
}

Checkpointer::~Checkpointer() {
  if (!impl_->async) return;
  std::exception_ptr err = impl_->drain();
  {
    MutexLock lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->writer.join();
  impl_->watch.join();
  if (err) {
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      spdlog::error("background checkpoint write failed: {}", e.what());
    }
  }
}

double Checkpointer::save(RankSnapshot&& snap) {
  auto t0 = std::chrono::steady_clock::now();
  // Here, in the caller's thread, so that the caller learns of a refusal at once.
  int64_t step = 0;
  try {
    step = snap.summary().step;
  } catch (const CheckpointError& e) {
    throw CheckpointWriteError(fmt::format("cannot write a checkpoint: {}", e.what()));
  }
  if (std::string why = non_finite_reason(snap); !why.empty())
    throw NonFiniteCheckpoint(
        fmt::format("not writing checkpoint {}: {}", checkpoint_path(impl_->run_dir, step), why));
  std::error_code ec;
  fs::path dir = fs::path(impl_->run_dir) / "checkpoints";
  fs::create_directories(dir, ec);
  // A write error like any other (a full disk fails this too): exit 74, not "no checkpoint".
  if (ec)
    throw CheckpointWriteError(
        fmt::format("cannot create checkpoint folder {}: {}", dir.string(), ec.message()));
  impl_->enqueue(std::move(snap));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Checkpointer::commit(int64_t step, int world) {
  impl_->commit_and_prune(step, world, Impl::kCommitTimeout);
}

RankSnapshot Checkpointer::reuse() {
  MutexLock lock(impl_->mu);
  return std::exchange(impl_->spare, RankSnapshot{});
}

void Checkpointer::wait() {
  if (!impl_->async) return;
  if (std::exception_ptr err = impl_->drain()) std::rethrow_exception(err);
}

}  // namespace trainrun
