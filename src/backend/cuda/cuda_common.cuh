// Shared device helpers of the CUDA backend: error checks, f16/bf16 packing, mma.sync wrappers.
// Included only by .cu files of src/backend/cuda.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

// nvcc cannot evaluate fmt's compile-time format checks, so .cu files build messages with
// std::string and throw through raise() instead of tq::fail().
#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    cudaError_t err_ = (expr);                                                            \
    if (err_ != cudaSuccess)                                                              \
      ::tq::cuda::raise(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " +    \
                        #expr + " failed: " + cudaGetErrorString(err_));                  \
  } while (0)

namespace tq::cuda {

// Throws tq::Error(msg) (defined in cuda_device.cpp, where fmt may be included).
[[noreturn]] void raise(const std::string& msg);

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// An environment switch as an integer: `fallback` when unset or empty.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// The shared-memory split (percent of the largest shared-memory configuration) preferred by the
// batch-1 GEMVs and by the short form of the TurboQuant decode: 132 KB of shared memory or more,
// the rest L1. The GEMVs need the L1 for their loads in flight (after the long TurboQuant decode's
// 228 KB split they were 4-5 us a layer slower) and run as fast here as with 25%; the short
// decode fits, so a short-context step switches no split between them (session 8).
constexpr int kSmallSmemCarveout = 58;
constexpr int kSmallSmemCarveoutBytes = 132 * 1024;

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_bf162(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ float2 unpack_half2(uint32_t u) {
  __half2 h = *reinterpret_cast<__half2*>(&u);
  return __half22float2(h);
}
// Weights of two partial attentions over disjoint keys, from their natural-log lse: out =
// wa * a + wb * b with wa + wb = 1 (both 0 when neither part saw a key), as merge_attention and
// tq_merge_rotate apply them; lse of the merged part = m + log(sum) (-inf when empty).
struct MergeWeights {
  float wa = 0.0f, wb = 0.0f, inv = 0.0f, m = -INFINITY;
  __device__ float lse() const { return wa + wb > 0.0f ? m + logf(wa + wb) : -INFINITY; }
};
__device__ __forceinline__ MergeWeights merge_weights(float la, float lb) {
  MergeWeights w;
  w.m = fmaxf(la, lb);
  if (w.m != -INFINITY) w.wa = expf(la - w.m), w.wb = expf(lb - w.m);
  w.inv = w.wa + w.wb > 0.0f ? 1.0f / (w.wa + w.wb) : 0.0f;
  return w;
}
// One merged value: an empty side's value is never used (0 * NaN).
__device__ __forceinline__ float merge_value(const MergeWeights& w, float a, float b) {
  return (w.wa * (w.wa > 0.0f ? a : 0.0f) + w.wb * (w.wb > 0.0f ? b : 0.0f)) * w.inv;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  return __byte_perm(a, b, sel);
}

// D = A * B + D for one m16n8k16 tile; A row-major 16x16, B col-major 16x8, f32 accumulators.
template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Loads N consecutive 32-bit words (16-byte vectors where N allows); p must be aligned to that.
template <int N>
__device__ __forceinline__ void load_words(const void* p, uint32_t (&w)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = __ldg(reinterpret_cast<const uint32_t*>(p) + i);
  }
}

// ldmatrix: four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i (shared
// memory, 16 bytes per row). The .trans form hands out the transposed matrices.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
}

// atomicAdd with acquire-release semantics at GPU scope: after a block barrier, one thread's
// call publishes the whole block's earlier writes (release is cumulative) and, for the block that
// sees the final count, makes the other blocks' writes visible (acquire): no block-wide fence.
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// Online softmax, one MMA accumulator column held by the 8 lanes of one tig (XOR 4, 8, 16: the
// column's rows): their maximum of mx (this lane's rows) joined with the running maximum m_run.
// Returns the new running maximum; m_use is the one the scores are taken against (0 while the
// column has seen only -inf: exp2 then gives 0, not NaN).
__device__ __forceinline__ float column_max8(float mx, float m_run, float& m_use) {
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m_new = fmaxf(m_run, mx);
  m_use = m_new == -INFINITY ? 0.0f : m_new;
  return m_new;
}
// Transpose of an 8x8 b16 tile in the MMA fragment layout (lane: row gid, columns 2 tig, +1).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}
// Online softmax of a decode warp's scores with the tokens as the MMA rows and the heads as its
// columns (decode_attention.cu, tq128_kernel.cuh): lane (gid, tig) holds heads a = 2 tig and
// b = 2 tig + 1 of its rows; the running maxima and this lane's part of the sums of both.
struct ColumnSoftmax {
  float m_a = -INFINITY, l_a = 0.0f, m_b = -INFINITY, l_b = 0.0f;
  // One step over NM tiles s[t] = {(row ra, head a), (ra, b), (rb = ra + 8, a), (rb, b)}: the
  // maxima move, the sums take exp2(s - max), and pb gets the PV B operands (P^T by movmatrix)
  // packed by pack(p_a, p_b, the row's V scale). Returns the factors (a, b) that rescale the
  // accumulators' columns (1 when a maximum did not move).
  template <int NM, class Exp2, class Pack>
  __device__ __forceinline__ float2 step(const float (&s)[NM][4], const float2 (&vsc)[NM],
                                         uint32_t (&pb)[2 * NM], Exp2 ex, Pack pack) {
    float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
    for (int t = 0; t < NM; ++t)
      mxa = fmaxf(mxa, fmaxf(s[t][0], s[t][2])), mxb = fmaxf(mxb, fmaxf(s[t][1], s[t][3]));
    float mua, mub;
    const float mna = column_max8(mxa, m_a, mua), mnb = column_max8(mxb, m_b, mub);
    const float ca = ex(m_a - mua), cb = ex(m_b - mub);
    float psa = 0.0f, psb = 0.0f;
#pragma unroll
    for (int t = 0; t < NM; ++t) {
      const float p0 = ex(s[t][0] - mua), p1 = ex(s[t][1] - mub);
      const float p2 = ex(s[t][2] - mua), p3 = ex(s[t][3] - mub);
      psa += p0 + p2;
      psb += p1 + p3;
      pb[2 * t] = movmatrix_trans(pack(p0, p1, vsc[t].x));
      pb[2 * t + 1] = movmatrix_trans(pack(p2, p3, vsc[t].y));
    }
    l_a = l_a * ca + psa;
    l_b = l_b * cb + psb;
    m_a = mna;
    m_b = mnb;
    return make_float2(ca, cb);
  }
  // After the last step: the sums over the 8 lanes of a tig (their rows), and the lanes with
  // gid 0 store (m, l) of heads 2 tig, 2 tig + 1 at wm / wl [row0 + 2 tig ..].
  __device__ __forceinline__ void store(float* wm, float* wl, int row0, int gid, int tig) {
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
      l_a += __shfl_xor_sync(0xffffffffu, l_a, o);
      l_b += __shfl_xor_sync(0xffffffffu, l_b, o);
    }
    if (gid == 0) {
      wm[row0 + 2 * tig] = m_a, wm[row0 + 2 * tig + 1] = m_b;
      wl[row0 + 2 * tig] = l_a, wl[row0 + 2 * tig + 1] = l_b;
    }
  }
};
// 2^x by the MUFU unit (ex2.approx.ftz): 2^-inf = 0, about 2 ulp; softmax numerators.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tq::cuda
