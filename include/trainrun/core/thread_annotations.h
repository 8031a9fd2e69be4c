// Thread-safety annotations the compiler checks (Clang's -Wthread-safety; GCC ignores them), and
// the annotated Mutex / MutexLock they need, as leveldb does. State shared between threads is
// declared GUARDED_BY(its mutex); a function that needs the lock held says REQUIRES(mu).
// tests/check_thread_safety.py compiles every file that includes this header with Clang and
// -Werror=thread-safety, so taking the wrong lock, or none, fails the unit suite.
//
// Condition variables: CondVar waits on a Mutex the caller holds. Write waits as loops
// (`while (!ready_) cv_.wait(mu_);`): a predicate lambda is checked as a separate function
// that does not know the lock is held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TRAINRUN_TSA(x) __attribute__((x))
#else
#define TRAINRUN_TSA(x)
#endif

#define CAPABILITY(x) TRAINRUN_TSA(capability(x))
#define SCOPED_CAPABILITY TRAINRUN_TSA(scoped_lockable)
#define GUARDED_BY(x) TRAINRUN_TSA(guarded_by(x))
#define REQUIRES(...) TRAINRUN_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) TRAINRUN_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TRAINRUN_TSA(release_capability(__VA_ARGS__))
#define EXCLUDES(...) TRAINRUN_TSA(locks_excluded(__VA_ARGS__))

namespace trainrun {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

class CondVar {
 public:
  // Atomically releases mu, waits for a notify (or a spurious wake-up), re-takes mu.
  void wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.mu_, std::adopt_lock);
    cv_.wait(lk);
    lk.release();  // still held: the caller's lock owns it
  }
  // As wait, but returns false once `deadline` has passed without a notify.
  template <class Clock, class Duration>
  bool wait_until(Mutex& mu, const std::chrono::time_point<Clock, Duration>& deadline)
      REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lk, deadline) == std::cv_status::no_timeout;
    lk.release();
    return notified;
  }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace trainrun
