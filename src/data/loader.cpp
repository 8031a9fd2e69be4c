// DataLoader: sample j is the window its SampleStream places, so batches do not depend on world
// size or micro-batching; one persistent worker thread prepares the next request.
// Threads: the step loop calls prefetch()/next(); the worker runs run(). The request flags and
// error are shared under mu. The buffers x, y change hands by the flags: the worker writes them
// only while requested && !ready, the step loop touches them only otherwise.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "trainrun/core/errors.h"
#include "trainrun/core/thread_annotations.h"
#include "trainrun/data/data.h"
#include "trainrun/data/sample_stream.h"

namespace trainrun {

struct DataLoader::Impl {
  const SampleStream& stream;
  int seq_len;

  Mutex mu;
  CondVar cv;
  bool stop GUARDED_BY(mu) = false;
  bool requested GUARDED_BY(mu) = false;  // a request waits for the worker or is being prepared
  bool ready GUARDED_BY(mu) = false;      // the worker finished it; next() may take it
  int64_t first GUARDED_BY(mu) = 0;
  int count GUARDED_BY(mu) = 0;
  std::vector<int32_t> x, y;  // handed over by requested/ready (above)
  std::exception_ptr error GUARDED_BY(mu);
  std::thread worker;

  explicit Impl(const SampleStream& s) : stream(s), seq_len(s.seq_len()) {}

  void fetch(int64_t first_sample, int n, int32_t* xo, int32_t* yo) const {
    const int64_t T = seq_len;
    std::vector<int32_t> window(static_cast<size_t>(T + 1));
    for (int i = 0; i < n; ++i) {
      stream.read(first_sample + i, window.data());
      std::copy(window.begin(), window.end() - 1, xo + i * T);
      std::copy(window.begin() + 1, window.end(), yo + i * T);
    }
  }

  void run() EXCLUDES(mu) {
    for (;;) {
      int64_t f = 0;
      int n = 0;
      {
        MutexLock lock(mu);
        while (!stop && !(requested && !ready)) cv.wait(mu);
        if (stop) return;
        f = first;
        n = count;
      }
      std::exception_ptr err;
      try {
        fetch(f, n, x.data(), y.data());
      } catch (...) {
        err = std::current_exception();
      }
      MutexLock lock(mu);
      error = err;
      ready = true;
      cv.notify_all();
    }
  }
};

DataLoader::DataLoader(const SampleStream& stream) : impl_(std::make_unique<Impl>(stream)) {
  impl_->worker = std::thread([impl = impl_.get()] { impl->run(); });
}

DataLoader::~DataLoader() {
  {
    MutexLock lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

void DataLoader::fetch(int64_t first, int count, int32_t* x, int32_t* y) const {
  if (first < 0 || count < 0)
    throw std::invalid_argument(fmt::format("DataLoader::fetch({}, {})", first, count));
  impl_->fetch(first, count, x, y);
}

void DataLoader::prefetch(int64_t first, int count) {
  if (first < 0 || count < 0)
    throw std::invalid_argument(fmt::format("DataLoader::prefetch({}, {})", first, count));
  MutexLock lock(impl_->mu);
  // A request nobody took yet is superseded; wait until the worker is done touching the buffers.
  while (impl_->requested && !impl_->ready) impl_->cv.wait(impl_->mu);
  impl_->first = first;
  impl_->count = count;
  const auto size = static_cast<size_t>(count) * static_cast<size_t>(impl_->seq_len);
  impl_->x.resize(size);
  impl_->y.resize(size);
  impl_->error = nullptr;
  impl_->requested = true;
  impl_->ready = false;
  impl_->cv.notify_all();
}

double DataLoader::next(int32_t* x, int32_t* y) {
  const auto t0 = std::chrono::steady_clock::now();
  MutexLock lock(impl_->mu);
  if (!impl_->requested) throw std::logic_error("DataLoader::next() without a prefetch()");
  while (!impl_->ready) impl_->cv.wait(impl_->mu);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl_->requested = false;
  impl_->ready = false;
  if (impl_->error) std::rethrow_exception(std::exchange(impl_->error, nullptr));
  std::copy(impl_->x.begin(), impl_->x.end(), x);
  std::copy(impl_->y.begin(), impl_->y.end(), y);
  return waited;
}

}  // namespace trainrun
