// TurboQuant bulk encoder (prefill chunks, conversion slices): a group of 8 lanes per vector, 4
// vectors per warp, and Lloyd-Max indices by a shared-memory table instead of 15 compares. Same
// float operations as quant::Rotation::apply and VectorCodec::encode (see encode_vec), so the
// codes match the CPU's.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_encode_vec.cuh"
#include "backend/cuda/tq_hadamard.cuh"

namespace tq::cuda {

// Quantization by table. A coordinate's index is #{k : y > b_k} over the 15 sorted boundaries.
// The float bits of y (sign, exponent, the top kQuantMant mantissa bits of |y|) pick a bin; where
// every bin holds at most one boundary, the bin's entry (the boundaries below it, and the one that
// may lie inside it) gives the index with one shared load and one compare: idx = n + (y > cand).
// Bins: |y| < 2^-10 is bin 0 (it holds only the boundary at 0 of a symmetric codebook), |y| >= 2
// the last; between, 8 bins an octave (the 4-bit codebooks' boundaries are >= 1.28x apart).
// Exact for every finite y; NaN (a non-finite vector) takes the compares.
constexpr int kQuantMant = 3, kQuantShift = 23 - kQuantMant;
constexpr uint32_t kQuantKeyLo = (127u - 10u) << kQuantMant;  // the key of 2^-10
constexpr uint32_t kQuantKeyHi = (127u + 1u) << kQuantMant;   // the key of 2
constexpr int kQuantBins = int(kQuantKeyHi - kQuantKeyLo) + 1;  // per sign

struct QuantTable {
  uint2 bin[2 * kQuantBins];  // [sign][bin]: (candidate boundary's float bits, boundaries below)
  double c2[16];              // centroid^2 by code (exact in double) for the norm correction
};

// Built by the whole block; true (on every thread) when each bin holds at most one boundary and
// the boundaries are sorted, i.e. when quantize_table is exact for this codec.
__device__ __forceinline__ bool build_quant_table(QuantTable& t, const TqCodecDev& c) {
  bool ok = true;
  for (int e = int(threadIdx.x); e < 2 * kQuantBins; e += int(blockDim.x)) {
    const bool neg = e >= kQuantBins;
    const uint32_t j = uint32_t(neg ? e - kQuantBins : e);
    // |y| in [lo, hi): y in [lo, hi) for the positive sign, in (-hi, -lo] for the negative one.
    const float lo = j == 0 ? 0.0f : __uint_as_float((kQuantKeyLo + j) << kQuantShift);
    const float hi = int(j) + 1 == kQuantBins ? __uint_as_float(0x7f800000u)
                                              : __uint_as_float((kQuantKeyLo + j + 1) << kQuantShift);
    int below = 0, inside = 0;
    for (int k = 0; k < 15; ++k) {
      const float b = c.boundaries[k];
      below += neg ? (b <= -hi) : (b < lo);
      inside += neg ? (b > -hi && b <= -lo) : (b >= lo && b < hi);
      if (k > 0 && !(c.boundaries[k - 1] <= b)) ok = false;
    }
    ok = ok && inside <= 1;
    const float cand = below < 15 ? c.boundaries[below] : __uint_as_float(0x7f800000u);
    t.bin[e] = make_uint2(__float_as_uint(cand), uint32_t(below));
  }
  for (int i = int(threadIdx.x); i < 16; i += int(blockDim.x))
    t.c2[i] = double(c.centroids[i]) * double(c.centroids[i]);
  return __syncthreads_and(ok) != 0;
}

__device__ __forceinline__ int quantize_table(float y, const QuantTable& t) {
  const uint32_t bits = __float_as_uint(y);
  const uint32_t key = min(max((bits & 0x7fffffffu) >> kQuantShift, kQuantKeyLo), kQuantKeyHi);
  const uint2 e = t.bin[key - kQuantKeyLo + (bits >> 31) * uint32_t(kQuantBins)];
  return int(e.y) + (y > __uint_as_float(e.x) ? 1 : 0);
}

// Bits [g * PER, (g + 1) * PER) of a sign mask (PER <= 32, a power of two).
template <int PER>
__device__ __forceinline__ uint32_t lane_signs(const uint32_t* mask, int g) {
  const uint32_t w = mask[(g * PER) >> 5] >> ((g * PER) & 31);
  return PER == 32 ? w : w & ((1u << PER) - 1u);
}

// Negates coordinate i where bit i of `signs` is set (exactly the CPU's -x).
template <int PER>
__device__ __forceinline__ void apply_signs(float (&v)[PER], uint32_t signs) {
#pragma unroll
  for (int i = 0; i < PER; ++i)
    v[i] = __uint_as_float(__float_as_uint(v[i]) ^ ((signs << (31 - i)) & 0x80000000u));
}

template <typename In>
__device__ __forceinline__ float to_f32(In x) {
  if constexpr (sizeof(In) == 2)
    return __bfloat162float(x);
  else
    return x;
}

// PER consecutive values of src (16-byte aligned when VEC) as floats.
template <int PER, bool VEC, typename In>
__device__ __forceinline__ void load_row(const In* src, float (&v)[PER]) {
  if constexpr (VEC && sizeof(In) == 4) {
#pragma unroll
    for (int j = 0; j < PER / 4; ++j) {
      const float4 q = reinterpret_cast<const float4*>(src)[j];
      v[4 * j] = q.x, v[4 * j + 1] = q.y, v[4 * j + 2] = q.z, v[4 * j + 3] = q.w;
    }
  } else if constexpr (VEC) {
#pragma unroll
    for (int j = 0; j < PER / 8; ++j) {
      const uint4 q = reinterpret_cast<const uint4*>(src)[j];
      const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // bf16 -> f32 is a shift of the bits
        v[8 * j + 2 * k] = __uint_as_float(w[k] << 16);
        v[8 * j + 2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < PER; ++i) v[i] = to_f32(src[i]);
  }
}

// Vectors [n_token, n_kv] of x (element strides x_ts, x_hs) to records h * head_stride + t0 + t;
// with `rot.f32` or `rot.f16`, also the rotated raw rows R x (a compressed layer's exact window;
// TqRowsOut, tq_cuda.h). Blocks loop over groups of 32 vectors; a group past the end works on
// the last vector and stores nothing (its lanes take part in the shuffles).
template <int D, bool VEC, typename In>
__global__ void __launch_bounds__(256, D <= 128 ? 4 : 2) encode_rows_kernel(const In* x, int64_t n_token, int n_kv,
                                                          int64_t x_ts, int64_t x_hs,
                                                          const TqCodecDev c, uint8_t* codes,
                                                          uint16_t* scales, int64_t head_stride,
                                                          int64_t t0, const TqRowsOut rot) {
  constexpr int G = 8, PER = D / G, WORDS = PER / 8;
  __shared__ QuantTable table;
  const bool table_ok = build_quant_table(table, c);
  const int g = int(threadIdx.x) & (G - 1);
  const uint32_t s_in = lane_signs<PER>(c.sign_in, g), s_out = lane_signs<PER>(c.sign_out, g);
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(float(D)));
  const int64_t n_vec = n_token * n_kv, per_block = blockDim.x / G;
  // The thread's vector (t, h) = divmod(vec, n_kv), advanced by the loop's stride without a
  // 64-bit division per iteration.
  const int64_t step = int64_t(gridDim.x) * per_block;
  const int64_t dt = step / n_kv;
  const int dh = int(step % n_kv);
  int64_t vec = blockIdx.x * per_block + threadIdx.x / G;
  int64_t tv = vec / n_kv;
  int hv = int(vec % n_kv);
  for (int64_t first = blockIdx.x * per_block; first < n_vec;
       first += step, vec += step, tv += dt + (hv + dh >= n_kv), hv += dh - (hv + dh >= n_kv ? n_kv : 0)) {
    const bool live = vec < n_vec;
    const int64_t t = live ? tv : n_token - 1;
    const int h = live ? hv : n_kv - 1;
    float v[PER];
    load_row<PER, VEC>(x + t * x_ts + h * x_hs + g * PER, v);
    double ss = 0.0;
#pragma unroll
    for (int i = 0; i < PER; ++i) ss += double(v[i]) * double(v[i]);
    if (rot.f32 || rot.f16) {
      float r[PER];
#pragma unroll
      for (int i = 0; i < PER; ++i) r[i] = v[i];
      apply_signs<PER>(r, s_in);
      warp_fwht<PER, G>(r, g);
#pragma unroll
      for (int i = 0; i < PER; ++i) r[i] = __fmul_rn(r[i], s);
      apply_signs<PER>(r, s_out);
      if (live && rot.f32 && t >= rot.f32_from) {
        float4* dst = reinterpret_cast<float4*>(rot.f32 + (h * rot.f32_head_stride + rot.f32_t0 + t) * D + g * PER);
#pragma unroll
        for (int j = 0; j < PER / 4; ++j)
          dst[j] = make_float4(r[4 * j], r[4 * j + 1], r[4 * j + 2], r[4 * j + 3]);
      }
      if (live && rot.f16) {
        uint4* dst = reinterpret_cast<uint4*>(rot.f16 + (h * rot.f16_head_stride + rot.f16_t0 + t) * D + g * PER);
#pragma unroll
        for (int j = 0; j < PER / 8; ++j) {
          uint32_t w[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const __half2 p = __floats2half2_rn(r[8 * j + 2 * k], r[8 * j + 2 * k + 1]);
            w[k] = *reinterpret_cast<const uint32_t*>(&p);
          }
          dst[j] = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    }
#pragma unroll
    for (int o = 1; o < G; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float n = float(sqrt(ss));
    const float inv = (n > 0.0f && isfinite(n)) ? __fdiv_rn(1.0f, n) : 0.0f;
#pragma unroll
    for (int i = 0; i < PER; ++i) v[i] = __fmul_rn(v[i], inv);
    apply_signs<PER>(v, s_in);
    warp_fwht<PER, G>(v, g);
#pragma unroll
    for (int i = 0; i < PER; ++i) v[i] = __fmul_rn(v[i], s);
    apply_signs<PER>(v, s_out);
    // Finite x and a finite 1/n keep every |y| <= ~1: no NaN reaches the table.
    const bool fast = table_ok && isfinite(ss) && !isinf(inv);
    int idx[PER];
    if (fast) {
#pragma unroll
      for (int i = 0; i < PER; ++i) idx[i] = quantize_table(v[i], table);
    } else {
#pragma unroll
      for (int i = 0; i < PER; ++i) idx[i] = quantize_linear(v[i], c);
    }
    uint32_t w[WORDS] = {};
    double cc = 0.0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const uint32_t code = sign_magnitude_code(uint32_t(idx[i]));  // the device's order
      w[i / 8] |= code << (4 * (i % 8));
      cc += table.c2[code];
    }
    if (c.corrected) {
#pragma unroll
      for (int o = 1; o < G; o <<= 1) cc += __shfl_xor_sync(0xffffffffu, cc, o);
    }
    if (!live) continue;
    uint8_t* out = codes + (h * head_stride + t0 + t) * (D / 2) + g * (PER / 2);
    if constexpr (WORDS == 1) {
      *reinterpret_cast<uint32_t*>(out) = w[0];
    } else if constexpr (WORDS == 2) {
      *reinterpret_cast<uint2*>(out) = make_uint2(w[0], w[1]);
    } else {
      *reinterpret_cast<uint4*>(out) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (g == 0) {
      const float sc = c.corrected ? float(double(n) / sqrt(cc)) : n;
      const __half hs = __float2half_rn(sc);
      scales[h * head_stride + t0 + t] = *reinterpret_cast<const uint16_t*>(&hs);
    }
  }
}

}  // namespace tq::cuda
