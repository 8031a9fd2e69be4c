// The CPU-executed device's own contract, on tiny kernels written for it: threads interleave at
// barriers and warp collectives, shuffles follow the hardware's lane rules, atomics add up,
// shared memory is per block, launches over an H200's limits fail as on a GPU, misuse of warp
// collectives and deadlocks are reported, and (plain build) the race checker names the hazard a
// missing __syncthreads leaves and stays silent when the barrier is there.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "mma.cuh"

namespace {

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  T* p = nullptr;
  size_t n;
};

// The last error and the detail cudaGetErrorString gives for it.
std::string last_error(cudaError_t* code) {
  *code = cudaGetLastError();
  return cudaGetErrorString(*code);
}

// ---- kernels ----

__global__ void rotate_through_shared(int* out, int n) {
  TRAINRUN_DYNAMIC_SHARED(int, s);
  const int t = static_cast<int>(threadIdx.x);
  s[t] = t;
  __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 1) % n] + 1000 * static_cast<int>(blockIdx.x);
}

// Every thread counts itself in before the barrier; after it, each must see the whole block.
__global__ void count_then_read(int* counter, int* seen) {
  atomicAdd(counter, 1);
  __syncthreads();
  seen[threadIdx.x] = *counter;
}

__global__ void shuffles(int* xor_sum, int* bcast, int* down, int* up, int* seg, unsigned* ballot) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int i = static_cast<int>(threadIdx.x);
  int v = lane;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  xor_sum[i] = v;
  bcast[i] = __shfl_sync(0xffffffffu, lane * 10, 3);
  down[i] = __shfl_down_sync(0xffffffffu, lane, 4);
  up[i] = __shfl_up_sync(0xffffffffu, lane, 2);
  seg[i] = __shfl_sync(0xffffffffu, lane, 1, 8);  // lane 1 of each 8-lane segment
  ballot[i] = __ballot_sync(0xffffffffu, lane % 3 == 0);
}

__global__ void atomics(float* fsum, unsigned long long* umin) {
  atomicAdd(fsum, 0.5f);
  atomicMin(umin, 1000ull + blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void per_block_shared(int* out) {
  __shared__ int mine;
  if (threadIdx.x == 0) mine = static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = mine;
}

__global__ void noop() {}

__global__ void neighbour_with_barrier(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

#if defined(TRAINRUN_SIM_RACECHECK)
__global__ void neighbour_no_barrier(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = s[threadIdx.x > 0 ? threadIdx.x - 1 : 0];  // a __syncthreads belongs before
}

__global__ void overwrite_while_read(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[0];
  if (threadIdx.x == 0) s[0] = 2.0f;  // others may still read it: a barrier belongs before this
}

__global__ void read_unwritten(float* out) {
  __shared__ float s[64];
  if (threadIdx.x < 32) s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];  // threads 32..63 read what nobody wrote
}
#endif

__global__ void barrier_against_shuffle(float* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

__global__ void shuffle_with_exited_lane(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// The tensor-core fragments of kernels/mma.cuh. Operands are built lane by lane from global
// memory by the PTX ISA's tables (written out again here, apart from the sim's code), so a sim
// that put an element in another lane or register gives a wrong product.
using trainrun::cuda::bf16;
__global__ void mma_from_table(float* D, const bf16* A, const bf16* B) {  // A 16x16, B 16x8
  namespace c = trainrun::cuda;
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  auto pair = [](const bf16* m, int i0, int i1) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(m[i0])) |
           static_cast<uint32_t>(__bfloat16_as_ushort(m[i1])) << 16;
  };
  const c::FragA a{{pair(A, g * 16 + 2 * t, g * 16 + 2 * t + 1),
                    pair(A, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1),
                    pair(A, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9),
                    pair(A, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9)}};
  const c::FragB b{{pair(B, 2 * t * 8 + g, (2 * t + 1) * 8 + g),
                    pair(B, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g)}};
  c::FragC d{{1.0f, 2.0f, 3.0f, 4.0f}};  // accumulated onto: D = A B + C
  c::mma_bf16(d, a, b);
  D[g * 8 + 2 * t] = d.x[0];
  D[g * 8 + 2 * t + 1] = d.x[1];
  D[(g + 8) * 8 + 2 * t] = d.x[2];
  D[(g + 8) * 8 + 2 * t + 1] = d.x[3];
}

// Each lane's four registers of an ldmatrix .x4 (and .trans) over a 16x16 shared matrix whose
// element [r][c] is 16 r + c (exact in bf16), with the row addresses an A operand uses: matrix i
// holds rows 8 (i % 2) .. +7 and columns 8 (i / 2) .. +7. `offset` shifts the rows by that many
// elements (a misaligned address unless a multiple of 8).
__global__ void ldmatrix_lanes(float* out, float* out_trans, int offset) {
  namespace c = trainrun::cuda;
  alignas(16) __shared__ bf16 m[16 * 24 + 8];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 16 * 24 + 8; i += 32) m[i] = __float2bfloat16_rn(0.0f);
  __syncthreads();
  for (int i = lane; i < 256; i += 32) m[offset + i / 16 * 24 + i % 16] = __float2bfloat16_rn(i);
  __syncthreads();
  const bf16* row = m + offset + (lane % 16) * 24 + (lane / 16) * 8;
  uint32_t r[4], rt[4];
  c::ldmatrix_x4(r, row);
  c::ldmatrix_x4_trans(rt, row);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      out[lane * 8 + 2 * i + j] = trainrun::bf16_to_f32(static_cast<uint16_t>(r[i] >> 16 * j));
      out_trans[lane * 8 + 2 * i + j] =
          trainrun::bf16_to_f32(static_cast<uint16_t>(rt[i] >> 16 * j));
    }
}

}  // namespace

TEST_CASE("mma.sync m16n8k16: fragments placed by the PTX tables give D = A B + C") {
  std::vector<bf16> a(256), b(128);
  std::vector<float> af(256), bf(128);
  for (int i = 0; i < 256; ++i) af[i] = static_cast<float>((i * 7) % 11 - 5);
  for (int i = 0; i < 128; ++i) bf[i] = static_cast<float>((i * 5) % 9 - 4) * 0.5f;
  for (int i = 0; i < 256; ++i) a[i] = __float2bfloat16_rn(af[i]);
  for (int i = 0; i < 128; ++i) b[i] = __float2bfloat16_rn(bf[i]);
  DeviceBuffer<bf16> A(256), B(128);
  DeviceBuffer<float> D(128);
  REQUIRE(cudaMemcpy(A.p, a.data(), 512, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(B.p, b.data(), 256, cudaMemcpyHostToDevice) == cudaSuccess);
  TRAINRUN_LAUNCH(1, 32, 0, mma_from_table)(D.p, A.p, B.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> d = D.host();
  const float c[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = c[(r >= 8) * 2 + n % 2];  // the lane's C[e] for element (r, n)
      for (int k = 0; k < 16; ++k) want += af[r * 16 + k] * bf[k * 8 + n];
      CHECK_MESSAGE(d[r * 8 + n] == want, "D[" << r << "][" << n << "]");
    }
}

TEST_CASE("ldmatrix .x4 and .trans deliver the documented elements to each lane") {
  DeviceBuffer<float> out(256), out_trans(256);
  TRAINRUN_LAUNCH(1, 32, 0, ldmatrix_lanes)(out.p, out_trans.p, 0);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> o = out.host(), ot = out_trans.host();
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 2; ++j) {
        const int r0 = 8 * (i % 2), c0 = 8 * (i / 2);  // matrix i's corner
        CHECK(o[lane * 8 + 2 * i + j] == static_cast<float>(16 * (r0 + g) + c0 + 2 * t + j));
        CHECK(ot[lane * 8 + 2 * i + j] == static_cast<float>(16 * (r0 + 2 * t + j) + c0 + g));
      }
  }
  cudaError_t e;
  TRAINRUN_LAUNCH(1, 32, 0, ldmatrix_lanes)(out.p, out_trans.p, 4);  // rows 8 bytes off
  CHECK(last_error(&e).find("not 16-byte aligned") != std::string::npos);
  CHECK(e == cudaErrorLaunchFailure);
}

TEST_CASE("threads of a block interleave at __syncthreads, also in a partial last warp") {
  for (int n : {256, 1000}) {
    DeviceBuffer<int> out(static_cast<size_t>(3 * n));
    TRAINRUN_LAUNCH(3, n, n * sizeof(int), rotate_through_shared)(out.p, n);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto h = out.host();
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < n; ++t) CHECK(h[b * n + t] == (t + 1) % n + 1000 * b);
  }
  DeviceBuffer<int> counter(1), seen(512);
  REQUIRE(cudaMemset(counter.p, 0, sizeof(int)) == cudaSuccess);
  TRAINRUN_LAUNCH(1, 512, 0, count_then_read)(counter.p, seen.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int v : seen.host()) CHECK(v == 512);
}

TEST_CASE("warp shuffles and votes follow the lane rules") {
  DeviceBuffer<int> xs(64), bc(64), dn(64), up(64), seg(64);
  DeviceBuffer<unsigned> bal(64);
  TRAINRUN_LAUNCH(1, 64, 0, shuffles)(xs.p, bc.p, dn.p, up.p, seg.p, bal.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto x = xs.host(), b = bc.host(), d = dn.host(), u = up.host(), s = seg.host();
  const auto v = bal.host();
  unsigned expect_ballot = 0;
  for (int l = 0; l < 32; l += 3) expect_ballot |= 1u << l;
  for (int i = 0; i < 64; ++i) {
    const int lane = i % 32;
    CHECK(x[i] == 31 * 32 / 2);
    CHECK(b[i] == 30);
    CHECK(d[i] == (lane + 4 < 32 ? lane + 4 : lane));
    CHECK(u[i] == (lane >= 2 ? lane - 2 : lane));
    CHECK(s[i] == (lane & ~7) + 1);
    CHECK(v[i] == expect_ballot);
  }
}

TEST_CASE("atomics from every thread of every block") {
  DeviceBuffer<float> sum(1);
  DeviceBuffer<unsigned long long> mn(1);
  REQUIRE(cudaMemset(sum.p, 0, sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(mn.p, 0xFF, sizeof(unsigned long long)) == cudaSuccess);
  TRAINRUN_LAUNCH(7, 96, 0, atomics)(sum.p, mn.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(sum.host()[0] == doctest::Approx(7 * 96 * 0.5));
  CHECK(mn.host()[0] == 1000ull);
}

TEST_CASE("static shared memory belongs to one block at a time") {
  DeviceBuffer<int> out(5 * 64);
  TRAINRUN_LAUNCH(5, 64, 0, per_block_shared)(out.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto h = out.host();
  for (int i = 0; i < 5 * 64; ++i) CHECK(h[i] == i / 64);
}

TEST_CASE("launches over an H200's limits fail as on a GPU and run nothing") {
  cudaError_t e;
  TRAINRUN_LAUNCH(1, dim3(64, 32), 0, noop)();
  CHECK(last_error(&e).find("2048 threads per block exceed 1024") != std::string::npos);
  CHECK(e == cudaErrorInvalidConfiguration);
  TRAINRUN_LAUNCH(1, 1025, 0, noop)();
  CHECK(last_error(&e).find("blockDim.x = 1025") != std::string::npos);
  CHECK(e == cudaErrorInvalidConfiguration);
  TRAINRUN_LAUNCH(dim3(1, 65536), 32, 0, noop)();
  CHECK(last_error(&e).find("gridDim.y") != std::string::npos);
  CHECK(e == cudaErrorInvalidConfiguration);
  TRAINRUN_LAUNCH(1, dim3(1, 1, 65), 0, noop)();
  CHECK((last_error(&e), e) == cudaErrorInvalidConfiguration);
  TRAINRUN_LAUNCH(0, 32, 0, noop)();
  CHECK((last_error(&e), e) == cudaErrorInvalidConfiguration);
  // Dynamic shared memory past the default 48 KB needs the kernel's attribute; 227 KB at most.
  DeviceBuffer<int> out(64);
  TRAINRUN_LAUNCH(1, 64, 64 * 1024, rotate_through_shared)(out.p, 64);
  CHECK(last_error(&e).find("cudaFuncSetAttribute") != std::string::npos);
  CHECK(e == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(rotate_through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             228 * 1024) == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(rotate_through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               64 * 1024) == cudaSuccess);
  TRAINRUN_LAUNCH(1, 64, 64 * 1024, rotate_through_shared)(out.p, 64);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("misused warp collectives and deadlocks are kernel failures") {
  cudaError_t e;
  DeviceBuffer<float> out(64);
  TRAINRUN_LAUNCH(1, 32, 0, barrier_against_shuffle)(out.p);
  CHECK(last_error(&e).find("deadlock") != std::string::npos);
  CHECK(e == cudaErrorLaunchFailure);
  TRAINRUN_LAUNCH(1, 32, 0, shuffle_with_exited_lane)(out.p);
  const std::string m = last_error(&e);
  CHECK(e == cudaErrorLaunchFailure);
  CHECK(m.find("exited") != std::string::npos);
  // A full-mask shuffle in a block of 20 threads names lanes that do not exist.
  TRAINRUN_LAUNCH(1, 20, 0, shuffle_with_exited_lane)(out.p);
  CHECK(last_error(&e).find("does not have") != std::string::npos);
  // The device goes on working after a failure.
  TRAINRUN_LAUNCH(1, 64, 0, neighbour_with_barrier)(out.p);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("device memory starts as NaN and copies stay inside their allocation") {
  DeviceBuffer<float> x(10);
  for (float v : x.host()) CHECK(v != v);
  std::vector<float> h(11, 1.0f);
  CHECK(cudaMemcpy(x.p, h.data(), 11 * sizeof(float), cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemcpy(h.data(), h.data() + 1, sizeof(float), cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemset(x.p + 5, 0, 6 * sizeof(float)) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(x.p, h.data(), 10 * sizeof(float), cudaMemcpyDefault) == cudaSuccess);
  cudaGetLastError();
}

#if defined(TRAINRUN_SIM_RACECHECK)
// (The AddressSanitizer flavour of the sim carries no race checker: see kernels/sim/meson.build.)
TEST_CASE("racecheck names the hazard a missing __syncthreads leaves, and only then") {
  cudaError_t e;
  DeviceBuffer<float> out(64);
  TRAINRUN_LAUNCH(1, 64, 0, neighbour_with_barrier)(out.p);
  CHECK(cudaGetLastError() == cudaSuccess);

  TRAINRUN_LAUNCH(2, 64, 0, neighbour_no_barrier)(out.p);
  std::string m = last_error(&e);
  CHECK(e == cudaErrorLaunchFailure);
  CHECK(m.find("read-after-write hazard on static shared + 0x") != std::string::npos);
  CHECK(m.find("kernel neighbour_no_barrier, block (0,0,0), thread (1,0,0), written by thread "
               "(0,0,0) with no __syncthreads between") != std::string::npos);
  CHECK(m.find("more hazards") != std::string::npos);

  TRAINRUN_LAUNCH(1, 64, 0, overwrite_while_read)(out.p);
  m = last_error(&e);
  CHECK(e == cudaErrorLaunchFailure);
  CHECK(m.find("write-after-read hazard on static shared + 0x") != std::string::npos);
  CHECK(m.find("thread (0,0,0), read by thread (") != std::string::npos);

  TRAINRUN_LAUNCH(1, 64, 0, read_unwritten)(out.p);
  m = last_error(&e);
  CHECK(e == cudaErrorLaunchFailure);
  CHECK(m.find("no thread of the block wrote") != std::string::npos);
}
#endif

TEST_CASE("events time the work between them, and only timing events can be timed") {
  cudaEvent_t a = nullptr, b = nullptr, untimed = nullptr, unrecorded = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&a, cudaEventDefault) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&b, cudaEventDefault) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&unrecorded, cudaEventDefault) == cudaSuccess);
  REQUIRE(cudaEventRecord(a) == cudaSuccess);
  REQUIRE(cudaEventRecord(untimed) == cudaSuccess);
  // Work on the stream between the two (the sim does it as it is issued).
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20)) {
  }
  REQUIRE(cudaEventRecord(b) == cudaSuccess);
  float ms = -1;
  REQUIRE(cudaEventElapsedTime(&ms, a, b) == cudaSuccess);
  CHECK(ms >= 20.0f);
  CHECK(ms < 20000.0f);
  CHECK(cudaEventElapsedTime(&ms, a, untimed) == cudaErrorInvalidResourceHandle);
  cudaError_t code;
  CHECK(std::string(last_error(&code)).find("cudaEventDisableTiming") != std::string::npos);
  CHECK(cudaEventElapsedTime(&ms, unrecorded, b) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  for (cudaEvent_t e : {a, b, untimed, unrecorded}) cudaEventDestroy(e);
}
