// All-reduce of a GPT-2-small-sized fp32 gradient buffer: trainrun's Communicator over the
// whole buffer, the same in 1M-element (4 MiB) buckets the way the trainer's GradSync cuts it
// (blocking one by one, and all in flight at once), and a plain MPI_Allreduce of the same bytes,
// all in the same run. Figures only; nothing is asserted.
//
//   mpirun --allow-run-as-root -np 2 --bind-to none build/bench/bench_allreduce [M_FLOATS] [REPS]
//
// Bus bandwidth follows nccl-tests: 2 (W-1) / W x bytes / seconds.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "trainrun/comm/comm.h"

using namespace trainrun;

namespace {

constexpr int64_t kBucket = int64_t{1} << 20;  // GradSync's bucket in the trainer

// Median seconds of `reps` timed runs after one warm-up; every rank starts together and the
// slowest rank's time counts (a collective is done when the last rank is done).
double time_it(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double mfloats = argc > 1 ? std::atof(argv[1]) : 124.0;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const auto n = static_cast<int64_t>(mfloats * 1e6);

  auto comm = make_mpi_communicator();  // initialises MPI
  const int w = comm->size(), rank = comm->rank();
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  Tensor all(buf.data(), DType::f32, Device::cpu, {n});
  const double bytes = static_cast<double>(n) * sizeof(float);
  const double bus_factor = 2.0 * (w - 1) / w;

  struct Row {
    const char* what;
    double seconds;
  };
  std::vector<Row> rows;
  rows.push_back({"Communicator::allreduce_sum, whole buffer",
                  time_it(reps, [&] { comm->allreduce_sum(all); })});
  rows.push_back({"allreduce_sum, 4 MiB buckets one by one", time_it(reps, [&] {
                    for (int64_t b = 0; b < n; b += kBucket)
                      comm->allreduce_sum(all.slice(b, {std::min(kBucket, n - b)}));
                  })});
  rows.push_back({"iallreduce_sum, 4 MiB buckets all in flight", time_it(reps, [&] {
                    std::vector<std::unique_ptr<Communicator::Request>> reqs;
                    for (int64_t b = 0; b < n; b += kBucket)
                      reqs.push_back(
                          comm->iallreduce_sum(all.slice(b, {std::min(kBucket, n - b)})));
                    for (auto& r : reqs) r->wait();
                  })});
  rows.push_back({"plain MPI_Allreduce (in place), whole buffer", time_it(reps, [&] {
                    // Counts above INT_MAX would need chunks; 124M floats fit.
                    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
                  })});

  if (rank == 0) {
    fmt::print(
        "all-reduce of {:.1f}M fp32 ({:.0f} MB) on {} ranks, median of {} (after 1 warm-up)\n",
        n / 1e6, bytes / 1e6, w, reps);
    fmt::print(
        "reference (FACTS.md): MPI_Allreduce of 100 MB on 2 ranks ~0.12-0.14 s, i.e. "
        "~{:.2f}-{:.2f} s for these bytes\n",
        0.12 * bytes / 1e8, 0.14 * bytes / 1e8);
    fmt::print("| method | seconds | s per 100 MB | algbw GB/s | busbw GB/s | vs plain MPI |\n");
    fmt::print("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    const double plain = rows.back().seconds;
    for (const Row& r : rows)
      fmt::print("| {} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {:.2f}x |\n", r.what, r.seconds,
                 r.seconds * 1e8 / bytes, bytes / r.seconds / 1e9,
                 bus_factor * bytes / r.seconds / 1e9, r.seconds / plain);
  }
  return 0;
}
