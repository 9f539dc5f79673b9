// TurboQuant parts of the Hopper prefill kernel (prefill_wgmma.cu): the producer's 4-bit ALU
// decode (codes to fp16 K / V tiles with the 8 centroid magnitudes held as byte planes in
// registers and selected with prmt, no table loads, in the kernel's 128B-swizzled tile layout),
// and the consumers' rotation of an output row back by R_v^T.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#ifndef TQ_WG_DECODE_SKIP
// Experiments (wrong results; the bounds of a cheaper decode): 1 = the two-producer decode skipped
// (stale stages), 2 = its shared-memory loads, fp16 stores and row scales kept, the per-code
// arithmetic dropped (each code word masked into finite halves, stored four times). 0: the decode.
#define TQ_WG_DECODE_SKIP 0
#endif
#ifndef TQ_WG_DEC_UNROLL
// Unroll of tq_decode_tile_alu's loop over a thread's 8 code rows: 8 (whole) since the decode
// needs 4 plane registers (session 13, same call: 2 / 4 / 8 gave 378 / 390 / 405 TFLOP/s at 4K).
#define TQ_WG_DEC_UNROLL 8
#endif

namespace tq::cuda::wgtq {

// Tiles of 128 keys x 128 coordinates: packed codes (64 bytes a row) in, fp16 (two 64-column
// halves [2][128][128 B], 16-byte chunk c of row r at (c & 7) ^ (r & 7)) out.
constexpr int kRows = 128, kDim = 128, kCodeBytes = kRows * kDim / 2, kTileBytes = kRows * kDim * 2;
[[maybe_unused]] constexpr int kDecUnroll = TQ_WG_DEC_UNROLL;  // used by a pragma

// ALU decode: the codebook is symmetric (c[15 - k] = -c[k], ascending: codebook.cpp) and stored
// codes are sign and magnitude (tq_cuda.h: code m is +M[m], code 8 + m is -M[m]), so the decode
// needs only the 8 fp16 magnitudes M[j] = cent[j] (cent by stored code): word i is the half2
// (M[2i], M[2i + 1]) (rounded like the table's pack_half2). Each row scales them and splits them
// into byte planes (tq_decode_tile_alu). Four registers, where v1's 16 centroids took eight and
// ptxas kept half of them in uniform registers, copied back before every prmt (8 moves per code
// word).
__device__ __forceinline__ uint32_t magnitude_pair(const float (&cent)[16], int i) {
  return uint32_t(__half_as_ushort(__float2half_rn(cent[2 * i]))) |
         uint32_t(__half_as_ushort(__float2half_rn(cent[2 * i + 1]))) << 16;
}
// Whether the fp16 centroids (by stored code) are symmetric as the ALU decode assumes:
// cent[8 + m] = -cent[m] bit for bit and cent[0 .. 7] non-negative (else the caller takes the
// table decode).
inline bool centroids_symmetric(const float (&cent)[16]) {
  for (int m = 0; m < 8; ++m) {
    const uint16_t pos = __half_as_ushort(__float2half_rn(cent[m]));
    const uint16_t neg = __half_as_ushort(__float2half_rn(cent[8 + m]));
    if ((pos & 0x8000u) != 0 || neg != (pos | 0x8000u)) return false;
  }
  return true;
}
// prmt.b32 with the selector's sign-replicate bits honoured (selector nibble bit 3).
__device__ __forceinline__ uint32_t prmt_s(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  __half2 x = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&x);
}
// Byte planes pl of 8 fp16 magnitudes: word i < 2 holds the low bytes of M[4i .. 4i + 3], word
// 2 + i their high bytes.
// Sign-magnitude codes n0..n7 (nibble i of w = coordinate i) to the fp16 pairs (c[n0], c[n1]) ..
// (c[n6], c[n7]): each code's magnitude (bits 0-2) selects its low and high bytes from the
// planes by prmt, the sign (bit 3) flips the high byte's top bit through a byte mask from bit 3
// (prmt's sign replication of the byte whose top bit is that bit: w << 4 for even codes, w for
// odd ones), and two prmts interleave low and high bytes. 15 ALU ops (v2: 18 on index-order codes,
// which first folded each index into its magnitude; v1: 21, on 8 planes).
__device__ __forceinline__ void decode8(uint32_t w, const uint32_t (&pl)[4], uint32_t (&o)[4]) {
  const uint32_t idx = w & 0x77777777u;  // magnitudes
  const uint32_t wb = w << 4;
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const uint32_t sg = g ? idx >> 16 : idx;
    const uint32_t m = prmt_s(wb, w, g ? 0xFBEAu : 0xD9C8u);  // 0xff where the code is negative
    const uint32_t l = prmt_s(pl[0], pl[1], sg);
    const uint32_t h = prmt_s(pl[2], pl[3], sg) ^ (m & 0x80808080u);
    o[2 * g] = prmt_s(l, h, 0x5140u), o[2 * g + 1] = prmt_s(l, h, 0x7362u);
  }
}

// A row's byte planes (decode8's pl): the 8 magnitudes mh (magnitude_pair) times the row's scale
// s2 (half2 of the fp16 scale twice), low bytes then high bytes. fp16 rounding is symmetric, so
// sign(c) * fp16(|c| s) equals fp16(c s) bit for bit (4 HMUL2 + 4 prmt a row, not 16 HMUL2).
__device__ __forceinline__ void row_planes(const uint32_t (&mh)[4], uint32_t s2, uint32_t (&sp)[4]) {
  uint32_t ms[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) ms[i] = hmul2(mh[i], s2);
  sp[0] = prmt_s(ms[0], ms[1], 0x6420u), sp[1] = prmt_s(ms[2], ms[3], 0x6420u);
  sp[2] = prmt_s(ms[0], ms[1], 0x7531u), sp[3] = prmt_s(ms[2], ms[3], 0x7531u);
}

// Lane roles of the ALU decode on the raw codes as the bulk copies leave them (row r at r * 64,
// 16-byte chunk q = codes 32q .. 32q + 31 at + 16 q). Quarter warp k4 (lanes 8 k4 .. 8 k4 + 7, the
// unit of a 16-byte shared access), lane x = (lane & 7) >> 1: row 4 (k4 >> 1) + x of the warp's 8,
// chunk (lane & 1) + 2 ((x >> 1) ^ (k4 & 1)). A quarter's loads then cover the 8 16-byte slots of a
// 128-byte line ((r & 1) * 4 + q), and so do its fp16 stores (slot (4 (q & 1) + j) ^ (r & 7)):
// no bank conflicts either way, with no swizzle in the staging.
__device__ __forceinline__ int decode_row(int lane) { return 4 * (lane >> 4) + ((lane & 7) >> 1); }
__device__ __forceinline__ int decode_chunk(int lane) {
  const int x = (lane & 7) >> 1;
  return (lane & 1) + 2 * ((x >> 1) ^ ((lane >> 3) & 1));
}

// ALU decode of one 128-key tile: K then V codes (raw stage rs in shared memory: codes, then
// half2 scales [2][128]) to fp16 tiles at ks (K, V after kTileBytes; 128B swizzle); row steps
// kN0 .. kN1 - 1 of 8 (0..4 = K, 4..8 = V). Producer
// thread t: rows decode_row(lane) + 8 w + 32 k (w = warp, k = 0..3), code chunk q =
// decode_chunk(lane) = fp16 chunks 4q .. 4q + 3 (conflict-free loads and stores, see there).
// The next row's codes load before this row's stores.
// kHalf (two producer warpgroups): warpgroup `half` (tid its thread 0..127) takes row steps
// 0 .. 3 = K's and V's k = 2 half, 2 half + 1, i.e. keys 64 half .. 64 half + 63.
template <int kN0 = 0, int kN1 = 8, bool kHalf = false>
__device__ __forceinline__ void tq_decode_tile_alu(const uint8_t* rs, uint8_t* ks, int tid,
                                                   const uint32_t (&mh)[4], int half = 0) {
  static_assert(!kHalf || (kN0 == 0 && kN1 == 4), "a half decodes its 4 row steps");
  const auto which_of = [](int n) { return kHalf ? n >> 1 : n >> 2; };
  const auto k_of = [half](int n) { return kHalf ? 2 * half + (n & 1) : n & 3; };
  const int lane = tid & 31, q = decode_chunk(lane), r0 = (tid >> 5) * 8 + decode_row(lane);
  const uint8_t* cb = rs + r0 * 64 + q * 16;
  const uint32_t* sb = reinterpret_cast<const uint32_t*>(rs + 2 * kCodeBytes) + r0;
  const uint32_t o0 = uint32_t((q >> 1) * kRows * 128 + r0 * 128);
  const int x0 = (4 * (q & 1)) ^ (r0 & 7);  // fp16 chunk 4q + j of row r0 at slot x0 ^ j
  uint4 code = *reinterpret_cast<const uint4*>(cb + which_of(kN0) * kCodeBytes + k_of(kN0) * 32 * 64);
  uint32_t s2 = sb[which_of(kN0) * kRows + k_of(kN0) * 32];
#pragma unroll kDecUnroll
  for (int n = kN0; n < kN1; ++n) {
    const int which = which_of(n), k = k_of(n);
    const uint32_t words[4] = {code.x, code.y, code.z, code.w}, s_cur = s2;
    if (n + 1 < kN1) {  // the next row's codes and scale, loaded ahead of this row's stores
      const int wn = which_of(n + 1), kn = k_of(n + 1);
      code = *reinterpret_cast<const uint4*>(cb + wn * kCodeBytes + kn * 32 * 64);
      s2 = sb[wn * kRows + kn * 32];
    }
    uint32_t sp[4];
    row_planes(mh, s_cur, sp);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t o[4];
#if TQ_WG_DECODE_SKIP == 2
      o[0] = o[1] = o[2] = o[3] = (words[j] & 0x03FF03FFu) | (sp[j] & 0x3C003C00u);
#else
      decode8(words[j], sp, o);
#endif
      *reinterpret_cast<uint4*>(ks + o0 + which * kTileBytes + k * 32 * 128 + ((x0 ^ j) << 4)) =
          make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// ALU decode of one 128-key tile of K or V from global memory (codes: row r's 64 bytes at r * 64;
// scales: fp16 per row) to plain fp16 rows at dst (row r's 256 bytes at r * 256; the ring of
// prefill_wgmma_ring.cu), rows at or past `rows` as zeros; the 128 threads of a warpgroup (tid),
// 16-byte code chunk tid & 3 (codes 32 q .. 32 q + 31, fp16 bytes 64 q ..) of rows tid >> 2, + 32,
// ... (a warp reads 8 whole rows: coalesced). Same bits as tq_decode_tile_alu.
__device__ __forceinline__ void tq_decode_rows_global(const uint8_t* codes, const uint16_t* scales,
                                                      int rows, uint8_t* dst, int tid,
                                                      const uint32_t (&mh)[4]) {
  const int q = tid & 3;
#pragma unroll 2
  for (int r = tid >> 2; r < kRows; r += 32) {
    uint4 code = make_uint4(0, 0, 0, 0);
    uint32_t s2 = 0;
    if (r < rows) {
      code = __ldg(reinterpret_cast<const uint4*>(codes + r * 64 + q * 16));
      const uint32_t sc = __ldg(scales + r);
      s2 = sc | sc << 16;
    }
    uint32_t sp[4];
    row_planes(mh, s2, sp);
    const uint32_t words[4] = {code.x, code.y, code.z, code.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t o[4];
      decode8(words[j], sp, o);
      *reinterpret_cast<uint4*>(dst + r * 256 + q * 64 + j * 16) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// v <- R^T v for R = D_out H D_in / sqrt(128) (sign_in / sign_out: D_in / D_out, bit i of word
// i / 32), on one row held by the 4 lanes of a quad: lane c4 holds coordinates 8 i + 2 c4 + e as
// v[2 i + e] (the wgmma accumulator's columns). The operations of tq_hadamard.cuh's warp_rotate
// (inverse) in its order: D_out's signs, the butterflies a + b / a - b by stage h = 1, 2, .., 64
// (h = 2 and 4 across the quad, as one fma by +-1), then the scale with D_in's signs; so the
// result has the bits of the rotation pass (tq_rotate) over the same row.
__device__ __forceinline__ void rotate_back_quad(float (&v)[32], int c4, const uint32_t (&sign_in)[4],
                                                 const uint32_t (&sign_out)[4]) {
  const auto neg = [c4](const uint32_t (&m)[4], int k) {
    const int i = k >> 1;
    return ((m[i >> 2] >> (8 * (i & 3) + 2 * c4 + (k & 1))) & 1u) != 0;
  };
#pragma unroll
  for (int k = 0; k < 32; ++k)
    if (neg(sign_out, k)) v[k] = -v[k];
#pragma unroll
  for (int i = 0; i < 16; ++i) {  // h = 1: the pair in a lane
    const float a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = __fadd_rn(a, b), v[2 * i + 1] = __fsub_rn(a, b);
  }
#pragma unroll
  for (int lo = 1; lo < 4; lo <<= 1) {  // h = 2, 4: the lower lane keeps a + b, the upper a - b
    const float sg = (c4 & lo) ? -1.0f : 1.0f;
#pragma unroll
    for (int k = 0; k < 32; ++k) v[k] = __fmaf_rn(sg, v[k], __shfl_xor_sync(0xffffffffu, v[k], lo));
  }
#pragma unroll
  for (int hb = 1; hb < 16; hb <<= 1)  // h = 8 hb: pairs i, i + hb of a lane's 16 column groups
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (!(i & hb))
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float a = v[2 * i + e], b = v[2 * (i + hb) + e];
          v[2 * i + e] = __fadd_rn(a, b), v[2 * (i + hb) + e] = __fsub_rn(a, b);
        }
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(128.0f));
#pragma unroll
  for (int k = 0; k < 32; ++k) v[k] = __fmul_rn(v[k], neg(sign_in, k) ? -s : s);
}

}  // namespace tq::cuda::wgtq
