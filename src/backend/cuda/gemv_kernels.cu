// One-token linear layers of the CUDA backend (decode at batch 1): out[N] (=, or +=) W[N, K] . x
// with bf16 weights streamed once at full bandwidth and f32 activations (no bf16 cast kernel);
// up to kMaxGemvParts weights on the same x in one launch (q/k/v, gate/up), optionally on
// RMSNorm(x) computed in the same launch.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ops_kernels.h"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {
namespace {

constexpr int kGemvWarps = 8;

// The weights of one launch, their rows numbered one after another.
struct GemvArgs {
  const __nv_bfloat16* w[kMaxGemvParts];
  float* out[kMaxGemvParts];
  const float* bias[kMaxGemvParts];
  int64_t row_end[kMaxGemvParts];  // exclusive end of each part's rows in the joint numbering
  int n_part;
  const float* norm_w;  // kNorm: the input is norm_w * (x / rms(x)), also written to h_out
  float eps;
  float* h_out;
};

// Part of joint row r (r < row_end[n_part - 1]) and its row inside that part. Arguments are
// read with constant indices (never through a pointer or reference to the parameter block, which
// would copy it to local memory).
static_assert(kMaxGemvParts == 3, "part_of and the picks below name the parts one by one");
__device__ __forceinline__ int part_of(int64_t r, int n_part, int64_t end0, int64_t end1,
                                       int64_t& local) {
  int p = 0;
  int64_t start = 0;
  if (n_part > 1 && r >= end0) p = 1, start = end0;
  if (n_part > 2 && r >= end1) p = 2, start = end1;
  local = r - start;
  return p;
}
#define TQ_GEMV_PICK(field, p) ((p) == 0 ? (field)[0] : (p) == 1 ? (field)[1] : (field)[2])

__device__ __forceinline__ float4 normed(float4 x, float4 w, float inv) {
  return make_float4(w.x * (x.x * inv), w.y * (x.y * inv), w.z * (x.z * inv), w.w * (x.w * inv));
}

__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  const float2 w0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
  const float2 w1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
  const float2 w2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.z));
  const float2 w3 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.w));
  return w0.x * a.x + w0.y * a.y + w1.x * a.z + w1.y * a.w + w2.x * b.x + w2.y * b.y +
         w3.x * b.z + w3.y * b.w;
}

// Block: kGemvWarps warps = kRows rows x (kGemvWarps / kRows) warps splitting each row's K.
// Lanes read 16-byte chunks of 8 weights, four chunks in flight per lane.
// With kNorm, every block first reduces sum(x^2) itself (x is a few KB, cached), and block 0
// writes the normed row to h_out.
template <int kRows, bool kNorm>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const GemvArgs a, const float* __restrict__ x, int64_t K, bool accumulate) {
  constexpr int kSplit = kGemvWarps / kRows;
  __shared__ float red[kGemvWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float4* xv = reinterpret_cast<const float4*>(x);
  const float4* nv = reinterpret_cast<const float4*>(a.norm_w);
  float inv = 1.0f;
  if constexpr (kNorm) {
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < K / 4; i += blockDim.x) {
      const float4 v = __ldg(xv + i);
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) total += red[w];
    inv = 1.0f / sqrtf(total / float(K) + a.eps);
    __syncthreads();  // red is reused for the row sums below
    if (blockIdx.x == 0)
      for (int64_t i = threadIdx.x; i < K / 4; i += blockDim.x)
        reinterpret_cast<float4*>(a.h_out)[i] = normed(__ldg(xv + i), __ldg(nv + i), inv);
  }
  // The input's 8 values of chunk c (normed with kNorm).
  auto in8 = [&](int64_t c, float4& lo, float4& hi) {
    lo = __ldg(xv + 2 * c);
    hi = __ldg(xv + 2 * c + 1);
    if constexpr (kNorm) {
      lo = normed(lo, __ldg(nv + 2 * c), inv);
      hi = normed(hi, __ldg(nv + 2 * c + 1), inv);
    }
  };
  const int64_t N = TQ_GEMV_PICK(a.row_end, a.n_part - 1);
  const int64_t row = int64_t(blockIdx.x) * kRows + warp / kSplit;
  const int part = warp % kSplit;
  const int64_t n8 = K / 8;
  const int64_t c0 = n8 * part / kSplit, c1 = n8 * (part + 1) / kSplit;
  float acc = 0.0f;
  if (row < N) {
    int64_t local;
    const int p = part_of(row, a.n_part, a.row_end[0], a.row_end[1], local);
    const uint4* w = reinterpret_cast<const uint4*>(TQ_GEMV_PICK(a.w, p) + local * K);
    float4 lo, hi;
    int64_t c = c0 + lane;
    for (; c + 96 < c1; c += 128) {
      uint4 wv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) wv[u] = __ldcs(w + c + 32 * u);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        in8(c + 32 * u, lo, hi);
        acc += dot8(wv[u], lo, hi);
      }
    }
    for (; c < c1; c += 32) {
      in8(c, lo, hi);
      acc += dot8(__ldcs(w + c), lo, hi);
    }
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) red[warp] = acc;
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int64_t r = int64_t(blockIdx.x) * kRows + threadIdx.x;
    if (r < N) {
      float s = 0.0f;
#pragma unroll
      for (int q = 0; q < kSplit; ++q) s += red[threadIdx.x * kSplit + q];
      int64_t local;
      const int p = part_of(r, a.n_part, a.row_end[0], a.row_end[1], local);
      const float* bias = TQ_GEMV_PICK(a.bias, p);
      if (bias) s += bias[local];
      float* o = TQ_GEMV_PICK(a.out, p) + local;
      *o = accumulate ? *o + s : s;
    }
  }
}

}  // namespace

bool gemv_supported(const float* x, int64_t K) {
  return K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void launch_gemv(std::span<const GemvPart> parts, const float* x, int64_t K, bool accumulate,
                 Stream stream, const float* norm_w, float eps, float* h_out) {
  if (parts.empty()) return;
  if (parts.size() > size_t(kMaxGemvParts)) raise("gemv: too many weights in one launch");
  if (!gemv_supported(x, K)) raise("gemv: K must be a multiple of 8 and x 16-byte aligned");
  if (norm_w && (!gemv_supported(norm_w, K) || !h_out || !gemv_supported(h_out, K)))
    raise("gemv: the norm weight and h_out must be 16-byte aligned");
  GemvArgs a{};
  a.norm_w = norm_w;
  a.eps = eps;
  a.h_out = h_out;
  a.n_part = int(parts.size());
  int64_t N = 0;
  for (int p = 0; p < a.n_part; ++p) {
    a.w[p] = static_cast<const __nv_bfloat16*>(parts[size_t(p)].w_bf16);
    a.out[p] = parts[size_t(p)].out;
    a.bias[p] = parts[size_t(p)].bias;
    a.row_end[p] = N += parts[size_t(p)].rows;
  }
  if (N <= 0) return;
  cudaStream_t st = as_stream(stream);
  // Rows per block: as many as keep >= 512 blocks in flight (small N splits each row's K
  // across more warps, so that enough bytes are in flight on every SM).
  const int64_t rows = std::clamp<int64_t>(N / 512, 1, kGemvWarps);
  const int r = rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
  const unsigned grid = unsigned((N + r - 1) / r);
  auto go = [&](auto kernel) { kernel<<<grid, kGemvWarps * 32, 0, st>>>(a, x, K, accumulate); };
  const bool nm = norm_w != nullptr;
  switch (r) {
    case 8: nm ? go(gemv_kernel<8, true>) : go(gemv_kernel<8, false>); break;
    case 4: nm ? go(gemv_kernel<4, true>) : go(gemv_kernel<4, false>); break;
    case 2: nm ? go(gemv_kernel<2, true>) : go(gemv_kernel<2, false>); break;
    default: nm ? go(gemv_kernel<1, true>) : go(gemv_kernel<1, false>);
  }
  check_last_launch("gemv");
}

}  // namespace tq::cuda
