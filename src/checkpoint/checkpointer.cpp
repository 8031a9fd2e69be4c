// Checkpointer: saves a run's checkpoints (in the caller's thread or in one persistent writer
// thread) and prunes old ones, never deleting the newest good file before a newer one exists.
// A non-finite snapshot is refused before any of that.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "checkpoint_dir.h"
#include "checkpoint_file.h"
#include "trainrun/checkpoint.h"
#include "trainrun/errors.h"

namespace trainrun {
namespace fs = std::filesystem;

struct Checkpointer::Impl {
  std::string run_dir;
  int keep_last;
  bool async;

  std::mutex mu;
  std::condition_variable cv;
  std::optional<CheckpointData> pending;
  bool busy = false;  // the writer holds a snapshot
  bool stop = false;
  std::exception_ptr error;
  std::thread writer;

  // Files known to verify: written by us, or verified once. Keyed by size and mtime so a file
  // changed since is checked again; pruning must not re-read gigabytes on every save.
  using FileKey = std::pair<uintmax_t, fs::file_time_type>;
  std::map<std::string, FileKey> verified;
  std::set<std::string> known_bad;

  static std::optional<FileKey> key_of(const std::string& path) {
    std::error_code ec1, ec2;
    FileKey key{fs::file_size(path, ec1), fs::last_write_time(path, ec2)};
    if (ec1 || ec2) return std::nullopt;
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
    for (const std::string& path : list_checkpoints(run_dir)) {
      bool good = is_good(path);
      if (good && good_seen < keep_last) {
        ++good_seen;
        continue;
      }
      if (good_seen == 0) continue;  // a damaged file newer than every good one: leave it
      if (!good && !is_trainrun_checkpoint(path)) continue;
      std::error_code ec;
      if (fs::remove(path, ec))
        spdlog::debug("pruned checkpoint {}", path);
      else if (ec)
        spdlog::warn("cannot remove old checkpoint {}: {}", path, ec.message());
      verified.erase(path);
    }
  }

  void write(const CheckpointData& data) {
    std::string path = checkpoint_path(run_dir, data.state.step);
    write_checked_checkpoint(path, data);  // save() made the finiteness pass
    verified.erase(path);
    if (std::optional<FileKey> key = key_of(path)) verified[path] = *key;
    known_bad.erase(path);
    prune();
  }

  void writer_loop() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || pending.has_value(); });
      if (!pending) return;  // stop requested and nothing left to write
      CheckpointData data = std::move(*pending);
      pending.reset();
      lock.unlock();
      std::exception_ptr err;
      try {
        write(data);
      } catch (...) {
        err = std::current_exception();
      }
      data = {};  // free the snapshot before reporting idle
      lock.lock();
      if (err && !error) error = err;
      busy = false;
      cv.notify_all();
    }
  }

  // Waits until the writer is idle; returns (and clears) its error, if any.
  std::exception_ptr drain() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !busy; });
    return std::exchange(error, nullptr);
  }
};

Checkpointer::Checkpointer(std::string run_dir, int keep_last, bool async)
    : impl_(std::make_unique<Impl>()) {
  impl_->run_dir = std::move(run_dir);
  impl_->keep_last = keep_last;
  impl_->async = async;
  remove_stale_temp_files(impl_->run_dir);
  if (async) impl_->writer = std::thread([this] { impl_->writer_loop(); });
}

Checkpointer::~Checkpointer() {
  if (!impl_->async) return;
  std::exception_ptr err = impl_->drain();
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->writer.join();
  if (err) {
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      spdlog::error("background checkpoint write failed: {}", e.what());
    }
  }
}

double Checkpointer::save(CheckpointData&& data) {
  auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Here, in the caller's thread, so that the caller learns of a refusal at once.
  if (std::string why = non_finite_reason(data); !why.empty())
    throw NonFiniteCheckpoint(fmt::format("not writing checkpoint {}: {}",
                                          checkpoint_path(impl_->run_dir, data.state.step), why));
  std::error_code ec;
  fs::path dir = fs::path(impl_->run_dir) / "checkpoints";
  fs::create_directories(dir, ec);
  if (ec)
    throw CheckpointError(
        fmt::format("cannot create checkpoint folder {}: {}", dir.string(), ec.message()));
  if (!impl_->async) {
    impl_->write(data);
    return seconds();
  }
  if (std::exception_ptr err = impl_->drain()) std::rethrow_exception(err);
  {
    std::lock_guard lock(impl_->mu);
    impl_->pending.emplace(std::move(data));
    impl_->busy = true;
  }
  impl_->cv.notify_all();
  return seconds();
}

void Checkpointer::wait() {
  if (!impl_->async) return;
  if (std::exception_ptr err = impl_->drain()) std::rethrow_exception(err);
}

}  // namespace trainrun
