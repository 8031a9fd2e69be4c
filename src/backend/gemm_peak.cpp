// measure_gemm_peak_gflops: the fp32 GEMM rate this backend reaches now, for MFU and
// `trainrun plan`. Written over the Backend interface (alloc, fill, matmul, synchronize), so it
// measures whichever backend it is given with that backend's own GEMM. One warm-up call, then
// timed calls for about a quarter of a second; the best call is reported because the machines
// are noisy (~15%) and the peak, not the average interference, is what MFU divides by.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "trainrun/backend.h"
#include "trainrun/clock.h"

namespace trainrun {

double measure_gemm_peak_gflops(Backend& be, int size) {
  if (size <= 0)
    throw std::invalid_argument(fmt::format("measure_gemm_peak_gflops: size {} <= 0", size));
  const int64_t n = size;
  const Device dev = be.device();
  const size_t bytes = static_cast<size_t>(n * n) * sizeof(float);
  void* a = be.alloc(bytes);
  void* b = be.alloc(bytes);
  void* c = be.alloc(bytes);
  Tensor A(a, DType::f32, dev, {n, n}), B(b, DType::f32, dev, {n, n}),
      C(c, DType::f32, dev, {n, n});
  double best = 0;
  try {
    be.fill(A, 0.5);
    be.fill(B, 0.25);
    be.matmul(C, A, B, Tensor());
    be.synchronize();
    const double flop = 2.0 * static_cast<double>(n) * n * n;
    const double until = now() + 0.25;
    for (int it = 0; it < 3 || now() < until; ++it) {
      const double t0 = now();
      be.matmul(C, A, B, Tensor());
      be.synchronize();
      const double s = now() - t0;
      best = std::max(best, flop / s * 1e-9);
    }
  } catch (...) {
    be.release(a);
    be.release(b);
    be.release(c);
    throw;
  }
  be.release(a);
  be.release(b);
  be.release(c);
  return best;
}

}  // namespace trainrun
