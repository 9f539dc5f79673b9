// One-token linear layers of the CUDA backend (decode at batch 1): out[N] (=, or +=) W[N, K] . x
// with bf16 weights streamed once at full bandwidth and f32 activations (no bf16 cast kernel);
// up to kMaxGemvParts weights on the same x in one launch (q/k/v, gate/up), optionally on
// RMSNorm(x) computed in the same launch, or on silu(gate) * up (the down projection). Two
// kernels: v1 (gemv_kernel, TQ_GEMV=1) and the staged v2 (gemv_staged_kernel, the default).
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ops_kernels.h"
#include "backend/cuda/pdl.cuh"
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
  // SwiGLU pairs (staged kernel, even rows per block): parts 0 and 1 are gate and up with
  // row_end[0] rows each; a block's group holds rows r.. of both, and its output is
  // act_out[r] = silu(gate . x) * (up . x) (out, bias and accumulate unused).
  float* act_out;
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

// v2 (TQ_GEMV=2, the default): the block stages its input once in shared memory (normed, or
// silu(gate) * up for the down projection) after issuing its first weight loads, so that the
// staging overlaps their latency; lanes keep eight 16-byte chunks in flight, 1024 threads per SM
// (one block of 32 warps, or four of 8). The staged input is split into the low and high float4
// of every 8-value chunk (xs[c], xs[K/8 + c]): a warp's reads of consecutive chunks are then
// conflict-free.
// With many row groups (LM head, gate/up) the grid is one wave of resident blocks, each looping
// over groups (the input is staged once per block, not once per group); the next group's
// first loads are issued before the current group's reduction.
enum class GemvIn { Plain, Norm, Swiglu };
constexpr int kStagedUnroll = 8;
// <= 64 registers: 1024 threads resident per SM, as one block of 32 warps (the default), or 4
// blocks of 8 warps (TQ_GEMV_WARPS=8), which stage the input four times per SM.
constexpr int kStagedThreadsPerSm = 1024;

template <int kWarps, int kRows, GemvIn kIn>
__global__ void __launch_bounds__(kWarps * 32, kStagedThreadsPerSm / (kWarps * 32))
    gemv_staged_kernel(const GemvArgs a, const float* __restrict__ x,
                       const float* __restrict__ x2, int64_t K, bool accumulate) {
  constexpr int kSplit = kWarps / kRows;
  extern __shared__ float4 xs[];  // K / 4: the chunks' low halves, then their high halves
  __shared__ float red[2][kWarps];  // row partial sums, alternating between groups
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t N = TQ_GEMV_PICK(a.row_end, a.n_part - 1);
  const int64_t groups = (N + kRows - 1) / kRows;
  const int part = warp % kSplit;
  const int64_t n8 = K / 8, K4 = K / 4;
  const int64_t c0 = n8 * part / kSplit, c1 = n8 * (part + 1) / kSplit;
  // This warp's row of group g (null past the last row) and its first batch of loads. Every
  // batch is kStagedUnroll chunks per lane, the last one predicated (no serial tail loop).
  uint4 wv[kStagedUnroll];
  constexpr int kHalf = kRows > 1 ? kRows / 2 : 1;  // SwiGLU pairs per group
  auto start = [&](int64_t g, const uint4*& w) {
    const int i = warp / kSplit;
    const int64_t row = g * kRows + i;
    w = nullptr;
    if (g >= groups) return;
    int64_t local;
    int p;
    if (a.act_out) {  // row i of the group: gate (i < kHalf) or up row g * kHalf + i % kHalf
      local = g * kHalf + i % kHalf;
      p = i / kHalf;
      if (local >= a.row_end[0]) return;
    } else {
      if (row >= N) return;
      p = part_of(row, a.n_part, a.row_end[0], a.row_end[1], local);
    }
    w = reinterpret_cast<const uint4*>(TQ_GEMV_PICK(a.w, p) + local * K);
#pragma unroll
    for (int u = 0; u < kStagedUnroll; ++u)
      if (c0 + lane + 32 * u < c1) wv[u] = __ldcs(w + c0 + lane + 32 * u);
  };
  int64_t g = blockIdx.x;
  const uint4* w;
  start(g, w);
  // Programmatic dependent launch: the weights above are constants, so their loads may run
  // ahead of the previous kernel; every read of its outputs (and every write) comes after this
  // wait (a no-op without the launch attribute). Then the next GEMV may start its own blocks.
  pdl_enter();
  const float4* xv = reinterpret_cast<const float4*>(x);
  auto put = [&](int64_t i, float4 v) { xs[(i & 1) * n8 + (i >> 1)] = v; };
  if constexpr (kIn == GemvIn::Norm) {
    const float4* nv = reinterpret_cast<const float4*>(a.norm_w);
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < K4; i += blockDim.x) {
      const float4 v = __ldg(xv + i);
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[1][warp] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) total += red[1][q];
    const float inv = 1.0f / sqrtf(total / float(K) + a.eps);
    for (int64_t i = threadIdx.x; i < K4; i += blockDim.x) {
      const float4 v = normed(__ldg(xv + i), __ldg(nv + i), inv);
      put(i, v);
      if (blockIdx.x == 0) reinterpret_cast<float4*>(a.h_out)[i] = v;
    }
  } else if constexpr (kIn == GemvIn::Swiglu) {
    const float4* uv = reinterpret_cast<const float4*>(x2);
    for (int64_t i = threadIdx.x; i < K4; i += blockDim.x) {
      const float4 gt = __ldg(xv + i), u = __ldg(uv + i);
      put(i, make_float4(gt.x / (1.0f + expf(-gt.x)) * u.x, gt.y / (1.0f + expf(-gt.y)) * u.y,
                         gt.z / (1.0f + expf(-gt.z)) * u.z, gt.w / (1.0f + expf(-gt.w)) * u.w));
    }
  } else {
    for (int64_t i = threadIdx.x; i < K4; i += blockDim.x) put(i, __ldg(xv + i));
  }
  __syncthreads();  // xs is complete; red[1] (the norm's sums) has been read by every thread
  const float4* xlo = xs;
  const float4* xhi = xs + n8;
  for (int it = 0; g < groups; ++it, g += gridDim.x) {
    float acc = 0.0f;
    if (w) {
      for (int64_t c = c0 + lane;;) {
#pragma unroll
        for (int u = 0; u < kStagedUnroll; ++u)
          if (c + 32 * u < c1) acc += dot8(wv[u], xlo[c + 32 * u], xhi[c + 32 * u]);
        c += 32 * kStagedUnroll;
        if (c >= c1) break;
#pragma unroll
        for (int u = 0; u < kStagedUnroll; ++u)
          if (c + 32 * u < c1) wv[u] = __ldcs(w + c + 32 * u);
      }
    }
    start(g + gridDim.x, w);  // the next group's first loads, in flight from here
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    float* rb = red[it & 1];
    if (lane == 0) rb[warp] = acc;
    // One barrier per group: red alternates, so the next group's writes (after this barrier)
    // never meet this group's reads (before the next one).
    __syncthreads();
    if (a.act_out) {
      const int64_t r = g * kHalf + threadIdx.x;
      if (threadIdx.x < kHalf && r < a.row_end[0]) {
        float sg = 0.0f, su = 0.0f;
#pragma unroll
        for (int q = 0; q < kSplit; ++q) {
          sg += rb[threadIdx.x * kSplit + q];
          su += rb[(threadIdx.x + kHalf) * kSplit + q];
        }
        a.act_out[r] = sg / (1.0f + expf(-sg)) * su;
      }
    } else if (threadIdx.x < kRows) {
      const int64_t r = g * kRows + threadIdx.x;
      if (r < N) {
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < kSplit; ++q) s += rb[threadIdx.x * kSplit + q];
        int64_t local;
        const int p = part_of(r, a.n_part, a.row_end[0], a.row_end[1], local);
        const float* bias = TQ_GEMV_PICK(a.bias, p);
        if (bias) s += bias[local];
        float* o = TQ_GEMV_PICK(a.out, p) + local;
        *o = accumulate ? *o + s : s;
      }
    }
  }
}

// Environment switches, read once: TQ_GEMV=1 (v1 kernel) / 2 (staged), TQ_GEMV_ROWS=1..32
// (rows per block; 0 = by size), TQ_GEMV_WARPS=8|32 (staged block size), TQ_GEMV_PDL=0 (staged launches without programmatic
// dependent launch), read through env_int (cuda_common.cuh).
int gemv_version() {
  static const int v = env_int("TQ_GEMV", 2);
  return v;
}
int gemv_rows(int64_t N) {
  static const int forced = env_int("TQ_GEMV_ROWS", 0);
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return forced;
  // As many rows per block as keep >= 512 blocks in flight (small N splits each row's K
  // across more warps, so that enough bytes are in flight on every SM).
  const int64_t rows = std::clamp<int64_t>(N / 512, 1, kGemvWarps);
  return rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
}

// Largest staged input (f32) a block may hold (K <= 24576); larger K takes the v1 kernel. Below
// every sm_90+ device's opt-in limit per block (99 KB on the smallest) with the static red[].
constexpr int64_t kMaxStagedBytes = 96 * 1024;

// Resident blocks of a staged kernel with smem bytes of dynamic shared memory on the current
// device, cached; the first use of a kernel on a device also raises its shared memory limit
// (the static red[] comes on top of the dynamic bytes, so even 48 KB of input needs it).
int resident_blocks(const void* kernel, int threads, size_t smem) {
  struct Entry {
    const void* kernel;
    size_t smem;
    int device, blocks;
  };
  static std::mutex mu;
  static Entry cache[128];
  static int n_cache = 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) raise("gemv: cudaGetDevice failed");
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < n_cache; ++i)
    if (cache[i].kernel == kernel && cache[i].smem == smem && cache[i].device == dev)
      return cache[i].blocks;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(kMaxStagedBytes)) != cudaSuccess)
    raise("gemv: cannot raise the shared memory limit");
  // kSmallSmemCarveout (cuda_common.cuh): the staged input needs at most 48 KB at Qwen3-8B
  // shapes, the rest is L1 for the weight loads in flight. Without a preference the SMs keep the
  // split of the kernel before: after the TurboQuant decode (225 KB of shared memory) the GEMVs of
  // a batch-1 decode step then took 4 us more per layer (bench/results/cuda-notes.md, session 7).
  // TQ_GEMV_CARVEOUT=N sets another percentage; -1 leaves the split to the driver.
  static const int carveout = env_int("TQ_GEMV_CARVEOUT", kSmallSmemCarveout);
  if (carveout >= 0 && cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            std::min(carveout, 100)) != cudaSuccess)
    raise("gemv: cannot set the shared memory carveout");
  int per_sm = 0, sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    raise("gemv: occupancy query failed");
  if (per_sm < 1) raise("gemv: the staged kernel does not fit on an SM");
  const int blocks = per_sm * sms;
  if (n_cache < 128) cache[n_cache++] = {kernel, smem, dev, blocks};
  return blocks;
}

// Warps per block of the staged kernel: 32 (one block per SM, rows per block 4..32; the input is
// staged and normed once per SM) or, with TQ_GEMV_WARPS=8, 8 (4 blocks per SM, rows per block
// 1..8, the input staged four times per SM: Qwen3-8B shape at batch 1, 217 against 226 tok/s
// in the same run). Read at every launch (the tests run both).
int staged_warps() { return env_int("TQ_GEMV_WARPS", 32) == 8 ? 8 : 32; }

// Rows per block and grid of a staged launch: the largest rows per block whose groups fill
// whole rounds of resident blocks to >= 90% (every block gets ceil or floor of groups / grid;
// the last round is the loss); else the best such fill. Groups beyond one wave are looped over
// by a one-wave grid. TQ_GEMV_ROWS forces the rows per block; TQ_GEMV_GRID (read at every
// launch; tests set it) forces the grid: 0 = one block per group, n > 0 = at most n blocks.
template <GemvIn kIn>
void launch_staged(const GemvArgs& a, const float* x, const float* x2, int64_t K,
                   bool accumulate, cudaStream_t st) {
  static const int forced_rows = env_int("TQ_GEMV_ROWS", 0);
  const int64_t N = a.row_end[a.n_part - 1];
  const size_t smem = size_t(K) * sizeof(float);
  using Kernel = void (*)(const GemvArgs, const float*, const float*, int64_t, bool);
  const int warps = staged_warps();
  const int rows0 = warps == 32 ? 4 : 1;  // rows per block of kernels[0]; kernels[i]: rows0 << i
  const Kernel kernels8[4] = {gemv_staged_kernel<8, 1, kIn>, gemv_staged_kernel<8, 2, kIn>,
                              gemv_staged_kernel<8, 4, kIn>, gemv_staged_kernel<8, 8, kIn>};
  const Kernel kernels32[4] = {gemv_staged_kernel<32, 4, kIn>, gemv_staged_kernel<32, 8, kIn>,
                               gemv_staged_kernel<32, 16, kIn>, gemv_staged_kernel<32, 32, kIn>};
  const Kernel* kernels = warps == 32 ? kernels32 : kernels8;
  int pick = -1;
  double pick_fill = -1.0;
  int64_t pick_groups = 0, pick_res = 0;
  for (int i = 3; i >= 0; --i) {
    const int r = rows0 << i;
    if (forced_rows > 0 && r != forced_rows) continue;
    if (a.act_out && r < 2) continue;  // SwiGLU pairs: half the group's rows gate, half up
    const int64_t groups = (N + r - 1) / r;
    const int64_t res =
        resident_blocks(reinterpret_cast<const void*>(kernels[i]), warps * 32, smem);
    const int64_t rounds = (groups + res - 1) / res;
    const double fill = double(groups) / double(res * rounds);
    if (pick < 0 || (pick_fill < 0.9 && fill > pick_fill)) {
      pick = i, pick_fill = fill, pick_groups = groups, pick_res = res;
    }
  }
  if (pick < 0) {  // TQ_GEMV_ROWS not one of this block size's (2 or more with pairs)
    pick = a.act_out && rows0 == 1 ? 1 : 0;
    const int64_t r = rows0 << pick;
    pick_groups = (N + r - 1) / r, pick_fill = 0.0;
  }
  int64_t grid = pick_groups;
  const char* forced = std::getenv("TQ_GEMV_GRID");
  if (forced && *forced) {
    const int64_t n = std::atoll(forced);
    if (n > 0) grid = std::min(pick_groups, n);
  } else if (pick_groups > pick_res && pick_fill >= 0.9) {
    grid = pick_res;
  }
  // With programmatic dependent launch (TQ_GEMV_PDL=0 turns it off) the launch may begin while
  // the previous kernel finishes: the blocks prefetch weights, then wait (see the kernel).
  // (Also prefetching the rest of each warp's first row into L2 here, cp.async.bulk.prefetch,
  // measured 197-198 against 217-218 tok/s at batch 1 in the same run: dropped.)
  launch_pdl(kernels[pick], dim3(unsigned(grid)), dim3(unsigned(warps * 32)), smem, st, a, x, x2,
             K, accumulate);
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
  if (gemv_version() == 2 && K * int64_t(sizeof(float)) <= kMaxStagedBytes) {
    if (norm_w)
      launch_staged<GemvIn::Norm>(a, x, nullptr, K, accumulate, st);
    else
      launch_staged<GemvIn::Plain>(a, x, nullptr, K, accumulate, st);
    return check_last_launch("gemv");
  }
  const int r = gemv_rows(N);
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

namespace tq::cuda {

bool gemv_fuses_swiglu(int64_t K) {
  return gemv_version() == 2 && K % 8 == 0 && K * int64_t(sizeof(float)) <= kMaxStagedBytes;
}

void launch_gemv_norm_swiglu(const void* gate_w, const void* up_w, int64_t rows,
                             const float* x, int64_t K, const float* norm_w, float eps,
                             float* h_out, float* act_out, Stream stream) {
  if (!gemv_fuses_swiglu(K) || !gemv_supported(x, K) || !gemv_supported(norm_w, K) ||
      !gemv_supported(h_out, K))
    raise("gemv_norm_swiglu: needs TQ_GEMV=2, K % 8 == 0, 16-byte aligned x, norm and h");
  if (rows <= 0) return;
  GemvArgs a{};
  a.n_part = 2;
  a.w[0] = static_cast<const __nv_bfloat16*>(gate_w);
  a.w[1] = static_cast<const __nv_bfloat16*>(up_w);
  a.row_end[0] = rows;
  a.row_end[1] = 2 * rows;
  a.norm_w = norm_w;
  a.eps = eps;
  a.h_out = h_out;
  a.act_out = act_out;
  launch_staged<GemvIn::Norm>(a, x, nullptr, K, false, as_stream(stream));
  check_last_launch("gemv_norm_swiglu");
}

void launch_gemv_swiglu(const GemvPart& part, const float* gate, const float* up, int64_t K,
                        bool accumulate, Stream stream) {
  if (!gemv_fuses_swiglu(K) || !gemv_supported(gate, K) || !gemv_supported(up, K))
    raise("gemv_swiglu: needs TQ_GEMV=2, K % 8 == 0, 16-byte aligned inputs");
  if (part.rows <= 0) return;
  GemvArgs a{};
  a.n_part = 1;
  a.w[0] = static_cast<const __nv_bfloat16*>(part.w_bf16);
  a.out[0] = part.out;
  a.bias[0] = part.bias;
  a.row_end[0] = part.rows;
  launch_staged<GemvIn::Swiglu>(a, gate, up, K, accumulate, as_stream(stream));
  check_last_launch("gemv_swiglu");
}

}  // namespace tq::cuda
