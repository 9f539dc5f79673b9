// TurboQuant encode of one vector by one warp, shared by the append kernels (tq_encode.cu) and
// the fused q/k RoPE + append (fused_kernels.cu).
#pragma once
#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_hadamard.cuh"

namespace tq::cuda {

// The rotated row R x (quant::Rotation::apply's result) of the warp's vector (lane l: its PER
// coordinates from l * PER) to rot_dst.
template <int PER>
__device__ __forceinline__ void store_rotated(const float (&v)[PER], const TqCodecDev& c,
                                              float* rot_dst, int lane) {
  float r[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) r[i] = v[i];
  warp_rotate<PER>(r, lane, c.sign_in, c.sign_out);
  float* dst = rot_dst + lane * PER;
#pragma unroll
  for (int i = 0; i < PER; ++i) dst[i] = r[i];
}

// The rotated row only (a record deferred to encode_vec without rot_dst, later).
template <int D>
__device__ __forceinline__ void rotate_vec(const float* src_row, const TqCodecDev& c,
                                           float* rot_dst, int lane) {
  constexpr int PER = D / 32;
  float v[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) v[i] = src_row[lane * PER + i];
  store_rotated<PER>(v, c, rot_dst, lane);
}

// The Lloyd-Max index of y: the number of boundaries below it (VectorCodec's quantize: NaN -> 0).
__device__ __forceinline__ int quantize_linear(float y, const TqCodecDev& c) {
  int idx = 0;
#pragma unroll
  for (int k = 0; k < 15; ++k) idx += y > c.boundaries[k] ? 1 : 0;
  return idx;
}

// One vector by one warp: lane l holds coordinates [l * D/32, (l + 1) * D/32) of src_row (global
// or shared memory). The float operations follow quant::Rotation::apply and VectorCodec::encode
// in the same order (butterflies a + b / a - b by stage, no contraction), so the codes match the
// CPU's (as sign-magnitude codes of its indices, the device's order). Writes record `rec` of
// codes / scales and, with rot_dst set, the rotated raw row R x (Rotation::apply's result) to
// rot_dst.
template <int D>
__device__ __forceinline__ void encode_vec(const float* src_row, const TqCodecDev& c,
                                           uint8_t* codes, uint16_t* scales, int64_t rec,
                                           float* rot_dst, int lane) {
  constexpr int PER = D / 32;
  const float* src = src_row + lane * PER;
  const bool rot = rot_dst != nullptr;
  float v[PER];
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    v[i] = src[i];
    ss += double(v[i]) * double(v[i]);
  }
  if (rot) store_rotated<PER>(v, c, rot_dst, lane);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float n = float(sqrt(ss));
  const float inv = (n > 0.0f && isfinite(n)) ? __fdiv_rn(1.0f, n) : 0.0f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const float u = __fmul_rn(v[i], inv);
    v[i] = tq_sign_set(c.sign_in, lane * PER + i) ? -u : u;
  }
  warp_fwht<PER>(v, lane);
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(float(D)));
  uint32_t packed = 0;
  double cc = 0.0;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const float y = __fmul_rn(v[i], tq_sign_set(c.sign_out, lane * PER + i) ? -s : s);
    int idx = 0;  // quantize_linear, written out: the decode kernels' code stays as measured
#pragma unroll
    for (int k = 0; k < 15; ++k) idx += y > c.boundaries[k] ? 1 : 0;
    const uint32_t code = sign_magnitude_code(uint32_t(idx));  // the device's order (tq_cuda.h)
    packed |= code << (4 * i);
    cc += double(c.centroids[code]) * double(c.centroids[code]);
  }
  uint8_t* out = codes + rec * (D / 2) + lane * (PER / 2);
#pragma unroll
  for (int i = 0; i < PER / 2; ++i) out[i] = uint8_t(packed >> (8 * i));
  if (c.corrected) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) cc += __shfl_xor_sync(0xffffffffu, cc, o);
  }
  if (lane == 0) {
    const float sc = c.corrected ? float(double(n) / sqrt(cc)) : n;
    const __half hs = __float2half_rn(sc);
    scales[rec] = *reinterpret_cast<const uint16_t*>(&hs);
  }
}

// One of a RecordJob's vectors by one warp: kv head h's key (is_v false) or value record.
__device__ __forceinline__ void encode_record(const RecordJob& job, int h, bool is_v, int lane) {
  const DecodeSeqDesc& d = job.dst;
  encode_vec<128>((is_v ? job.v : job.k) + int64_t(h) * 128, is_v ? job.vc : job.kc,
                  static_cast<uint8_t*>(const_cast<void*>(is_v ? d.v : d.k)),
                  const_cast<uint16_t*>(is_v ? d.v_scale : d.k_scale), h * d.head_stride + d.len,
                  nullptr, lane);
}

}  // namespace tq::cuda
