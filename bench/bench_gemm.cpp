// Prints the fp32 GEMM rate of the CPU backend's matmul (oneDNN sgemm) on the shapes a GPT-2
// small step runs, and measure_gemm_peak_gflops, which MFU and `trainrun plan` use.
// out[M,N] = in[M,K] . w[N,K]^T, 2*M*N*K flop per call. Figures only; nothing is asserted.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "trainrun/backend/backend.h"

using namespace trainrun;

namespace {

struct Shape {
  int64_t M, N, K;
  const char* what;
};

// Median and best GFLOP/s over timed calls lasting about a second in all, after one warm-up.
void bench(Backend& be, const Shape& s) {
  std::vector<float> in(s.M * s.K), w(s.N * s.K), out(s.M * s.N);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7) * 0.1f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) * 0.1f;
  Tensor tin(in.data(), DType::f32, Device::cpu, {s.M, s.K});
  Tensor tw(w.data(), DType::f32, Device::cpu, {s.N, s.K});
  Tensor tout(out.data(), DType::f32, Device::cpu, {s.M, s.N});
  be.matmul(tout, tin, tw, Tensor());
  const double flop = 2.0 * s.M * s.N * s.K;
  std::vector<double> rates;
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::seconds(1);
  while (rates.size() < 3 || clock::now() < until) {
    const auto t0 = clock::now();
    be.matmul(tout, tin, tw, Tensor());
    rates.push_back(flop / std::chrono::duration<double>(clock::now() - t0).count() * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  fmt::print("  M={:<5} N={:<6} K={:<5} {:<28} median {:7.1f} GFLOP/s  best {:7.1f}  ({} calls)\n",
             s.M, s.N, s.K, s.what, rates[rates.size() / 2], rates.back(), rates.size());
}

}  // namespace

int main() {
  auto be = make_cpu_backend();
  fmt::print("backend: {}\n", be->describe());
  fmt::print("sgemm via Backend::matmul (out = in . w^T):\n");
  for (const Shape& s :
       {Shape{1024, 1024, 1024, "square"}, Shape{1024, 768, 256, "attention proj, B*T=1024"},
        Shape{512, 50304, 768, "lm head, GPT-2 vocab"}})
    bench(*be, s);
  for (int size : {512, 1024, 2048})
    fmt::print("measure_gemm_peak_gflops(size={}): {:.1f} GFLOP/s\n", size,
               measure_gemm_peak_gflops(*be, size));
  return 0;
}
