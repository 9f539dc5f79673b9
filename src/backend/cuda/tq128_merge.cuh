// Parameters, constants and device helpers of the TurboQuant head_dim-128 decode kernel
// (decode_tq128.cu), and its cross-split merge: the last block of each (sequence, kv head,
// subgroup) combines the splits' partial sums and undoes the V rotation.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/tq_hadamard.cuh"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda::tq128 {

constexpr int D = 128;
constexpr int kWarps = 12;  // one block per SM shares the 64 KB table
constexpr int kThreads = kWarps * 32;
static_assert(kWarps % 4 == 0, "the exact tail splits 32-row chunks over 4 warps per head group");
constexpr int kStageTok = 16 * kWarps;  // 16 tokens per warp per stage
// Stage slots of the pipeline: long contexts keep 5 stages in flight. v13's short form (batch 1,
// one stage a split, at most kPreRowsShort exact-tail rows a split, all loaded at the start) has
// one slot, its queries outside it, and fits the split the GEMVs run with (kSmallSmemCarveout).
constexpr int kStagesLong = 6;
constexpr int kStagesShort = 1;
// Stages a batch-1 block may load before griddepcontrol.wait (v15; the early records, TqParams).
constexpr int kEarlyStages = 2;
constexpr int kRow = D / 2;                                             // code bytes per token
constexpr int kStageBytes = 2 * kStageTok * kRow + 2 * kStageTok * 2;  // K, V codes; K, V scales
// Table: entry e (a code byte) at e * kLutStride bytes, lane l's copy of half2 (c[lo], c[hi]) at
// + 4 l (no bank conflicts). Big table (stride 256, 64 KB): one PRMT builds a lookup's offset
// (byte << 8 | 4 l), 2 blocks per SM. Small table (stride 128, 32 KB): SHF + LOP3, 3 blocks per SM.
constexpr bool kBigLut = true;
constexpr int kLutStride = kBigLut ? 256 : 128;
constexpr int kLutBytes = 256 * kLutStride;
constexpr int scratch_bytes(int S) { return kLutBytes + S * kStageBytes; }  // reused after the loop
// Past the scratch: up to pre_rows(S) exact-tail rows of K and V, loaded at the start (v10), a
// copy of the rotated queries for the tail (those in the last stage slot are overwritten) and, in
// the short form, the rotated queries themselves ([2][8][D]: plain and swizzled).
constexpr int kPreRows = 8;
constexpr int kPreRowsShort = 24;
constexpr int pre_rows(int S) { return S == kStagesShort ? kPreRowsShort : kPreRows; }
constexpr size_t smem_bytes(int S) {
  return size_t(scratch_bytes(S)) +
         (2 * pre_rows(S) + 8 + (S == kStagesShort ? 16 : 0)) * D * sizeof(float);
}
static_assert(smem_bytes(kStagesLong) + 128 <= 227 * 1024, "one block per SM: the opt-in limit");
static_assert(smem_bytes(kStagesShort) + 1024 <= kSmallSmemCarveoutBytes,
              "the short form fits the GEMVs' shared-memory split");
constexpr int kBlocksPerSm = 1;
static_assert(kBlocksPerSm == kTq128BlocksPerSm, "kernel_choice.h sizes the wave");
static_assert(kPreRows == kTq128TailRowsPerSplit, "kernel_choice.h sizes short tails' splits");
static_assert(kPreRowsShort == kTq128ShortTailRows && kStagesShort * kStageTok == kTq128ShortStageTokens,
              "kernel_choice.h predicts the short form");
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -INFINITY;

struct TqParams {
  const float* q;
  float* out;
  float* part_acc;  // [B][n_head][n_total][D]
  float* part_ml;   // [B][n_head][n_total][2]
  int* counters;    // [B][n_head_kv][n_sub], zero between launches
  const uint8_t* k;
  const uint8_t* v;
  const uint16_t* ks;
  const uint16_t* vs;
  int64_t seq_stride, head_stride;
  const int32_t* lens;
  const float* kt;  // exact tail (rotated rows), or null
  const float* vt;
  int64_t t_seq_stride, t_head_stride;
  const int32_t* tlens;
  int len1, tlen1;  // batch 1: the lengths by value (>= 0), else -1 (read lens / tlens)
  int early;        // with len1: records [0, early) may be loaded before griddepcontrol.wait
  int max_early;  // at most this many stages before the wait (kEarlyStages; TQ_DECODE_EARLY_STAGES)
  const DecodeSeqDesc* seqs;  // batched form: per-sequence pointers (then k .. tlens unused)
  int n_head, n_head_kv, G, n_split, n_total, n_sub;
  float qscale;
  // Benchmark probes (TQ_DECODE_MODE, wrong results): 0 normal; 1 loads only; 2 no loads and no
  // math (prologue + merge chain); 3 return at once (launch cost); 4 no partials and no merge; 5 no
  // merge; 6 no counter and no merge.
  int mode;
  int swizzle;  // 1 (v9): conflict-free query fragment loads and partial-sum stores; 0: v8
  // 1 (v11): the splits of a (sequence, kv head, subgroup) form one cluster (or n_split is 1)
  // and merge through distributed shared memory; 0: the last block merges from global memory.
  int cluster;
  // Probe TQ_DECODE_STAMPS=1: thread 0 of each block writes kStamps clock64 values (phases
  // below), then the %globaltimer (32 ns ticks) at each, to stamps[block * 2 kStamps ..].
  unsigned long long* stamps;
  float cent[16];
  uint32_t ksign_in[8], ksign_out[8], vsign_in[8], vsign_out[8];
  int has_rec;    // short form: write rec's records too (DecodeAttnArgs::record)
  RecordJob rec;
};

// Phases stamped by the probe (thread 0): 0 start, 1 barriers initialised, 2 first stages
// issued, 3 queries in registers, 4 first stage arrived (warp 0), 5 codes done, 6 exact tail done
// and the warps' partials stored, 7 their weights, 8 the block's partial combined, 9 merge
// decided (the counter, or the first cluster barrier), 10 the merging warp has the splits'
// (m, l), 11 end.
constexpr int kStamps = 12;
// The stamp buffer for `blocks` blocks of the next launch (grown on demand; tq128_stamps.cu,
// which also prints the last launch's: tq128_stamp_report()).
unsigned long long* stamp_buffer(size_t blocks);
// Kept in shared memory until the last one (a global store before the barrier-init fence
// would make the fence wait for it).
__device__ __forceinline__ void stamp(const TqParams& p, int k) {
  __shared__ unsigned long long keep[2 * kStamps];
  if (!p.stamps || threadIdx.x != 0) return;
  keep[k] = clock64();
  unsigned long long g;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(g));
  keep[kStamps + k] = g;
  if (k == kStamps - 1) {
    const unsigned blk = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    for (int i = 0; i < 2 * kStamps; ++i) p.stamps[blk * (2 * kStamps) + i] = keep[i];
  }
}

// Walsh-Hadamard transform (unnormalised) of a 128-vector held by a warp, lane l owning elements
// 4 l .. 4 l + 3: the butterflies (j, j + h) for h = 1, 2 in registers, then h = 4 .. 64 by
// shuffles; same operations in the same order as the shared-memory passes (bit-identical).
__device__ __forceinline__ void fwht128(float (&e)[4], int lane) {
  const float a0 = e[0] + e[1], a1 = e[0] - e[1], a2 = e[2] + e[3], a3 = e[2] - e[3];
  e[0] = a0 + a2, e[1] = a1 + a3, e[2] = a0 - a2, e[3] = a1 - a3;
#pragma unroll
  for (int k = 1; k < 32; k <<= 1) {
    const bool hi = lane & k;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float o = __shfl_xor_sync(0xffffffffu, e[i], k);
      e[i] = hi ? o - e[i] : e[i] + o;
    }
  }
}
__device__ __forceinline__ int pi(int j) { return j ^ ((j >> 1) & 1); }
// Column of (head row r, dim c) in the per-warp partial sums (v9, swz = 0xe): bits 1-3 of c
// XOR (r / 2 % 4, c / 32 % 2), so the MMA-layout float2 stores (r = 2 tig (+1), c = 16 gid + 2 m)
// of a half warp hit 16 different bank pairs, and 32 consecutive c stay a permutation of 32 banks.
__device__ __forceinline__ int wcol(int r, int c, int swz) {
  return c ^ (((((r >> 1) & 3) | (((c >> 5) & 1) << 2)) << 1) & swz);
}
// Table entry for byte K of w: offset (byte << 8) | lane4 by one PRMT, then one LDS.
template <int K>
__device__ __forceinline__ uint32_t lut_byte(const uint8_t* lut, uint32_t lane4, uint32_t w) {
  uint32_t off;
  if constexpr (kBigLut)
    off = prmt(w, lane4, 0x5504u | (K << 4));
  else
    off = ((K == 0 ? (w << 7) : (w >> (8 * K - 7))) & 0x7f80u) | lane4;
  return *reinterpret_cast<const uint32_t*>(lut + off);
}

// The exact tail of the short form (v13): this warp takes head g over rows cls, cls + n_cls, ..
// (< nr) of the rows preloaded at tpre ([K, V][pre][D], rotated), in a rolled loop, and stores one
// partial for the class: columns (wcol) at tacc + (cls * 8 + g) * D, (m, l) at tm / tl[cls * 8 + g].
// The tail runs once per launch, so its code is fetched cold (this is a tenth of the long form's
// unrolled code), and its rows' online softmax is a serial chain, split over the classes (9 rows
// on one warp took 1.6 us, session 8).
__device__ __forceinline__ void tail_short(const float* tpre, int pre, const float* qkeep, int nr,
                                           int g, int cls, int n_cls, int swz, float* tacc,
                                           float* tm, float* tl) {
  const int lane = threadIdx.x & 31;
  const float4 qv = reinterpret_cast<const float4*>(qkeep + g * D)[lane];
  float m = kNegInf, l = 0.0f;
  float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
  for (int r = cls; r < nr; r += n_cls) {
    const float4 kv = reinterpret_cast<const float4*>(tpre + r * D)[lane];
    const float4 vv = reinterpret_cast<const float4*>(tpre + (pre + r) * D)[lane];
    float d = qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    const float mn = fmaxf(m, d), c = exp2f(m - mn), e = exp2f(d - mn);
    a = make_float4(a.x * c + e * vv.x, a.y * c + e * vv.y, a.z * c + e * vv.z, a.w * c + e * vv.w);
    l = l * c + e;
    m = mn;
  }
  float* row = tacc + (cls * 8 + g) * D;
  *reinterpret_cast<float2*>(row + wcol(g, 4 * lane, swz)) = make_float2(a.x, a.y);
  *reinterpret_cast<float2*>(row + wcol(g, 4 * lane + 2, swz)) = make_float2(a.z, a.w);
  if (lane == 0) tm[cls * 8 + g] = m, tl[cls * 8 + g] = l;
}

// Merge of one head's n splits by one warp (lane l: columns 4 l .. 4 l + 3), undoing the V
// rotation: acc_of(s) gives split s's float4 of columns, ml_of(s) its (m, l); wg and lg are n
// floats of this warp's scratch. The lanes issue the column loads of the first 16 splits, then
// the (m, l) loads (one round trip for both), and compute the weights while the columns arrive.
template <class AccOf, class MlOf>
__device__ __forceinline__ void merge_head(const TqParams& p, int n, AccOf acc_of, MlOf ml_of,
                                           float* wg, float* lg, float* orow) {
  const int lane = threadIdx.x & 31;
  float4 v[16];
#pragma unroll
  for (int u = 0; u < 16; ++u) v[u] = u < n ? acc_of(u) : make_float4(0, 0, 0, 0);
  float M = kNegInf;
  for (int s = lane; s < n; s += 32) {
    const float2 ml = ml_of(s);
    wg[s] = ml.x;
    lg[s] = ml.y;
    M = fmaxf(M, ml.x);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  stamp(p, 10);
  float l = 0.0f;
  for (int s = lane; s < n; s += 32) {
    const float e = M == kNegInf ? 0.0f : exp2f(wg[s] - M);
    wg[s] = e;
    l += e * lg[s];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int s = lane; s < n; s += 32) wg[s] *= inv;
  __syncwarp();
  float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0b = 0; s0b < n; s0b += 16) {
    if (s0b > 0) {
#pragma unroll
      for (int u = 0; u < 16; ++u)
        v[u] = s0b + u < n ? acc_of(s0b + u) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      const float w = s0b + u < n ? wg[s0b + u] : 0.0f;
      a.x += w * v[u].x, a.y += w * v[u].y, a.z += w * v[u].z, a.w += w * v[u].w;
    }
  }
  float e[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = tq_sign_set(p.vsign_out, 4 * lane + i) ? -e[i] : e[i];
  fwht128(e, lane);  // x = D1 H D2 y / sqrt(D), in registers (v9)
  const float sc = rsqrtf(float(D));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = 4 * lane + i;
    orow[c] = e[i] * (tq_sign_set(p.vsign_in, c) ? -sc : sc);
  }
}

// Merge of all splits by the last block to finish, from the partials in global memory (ordered
// by its acquire-release count): warp g < gn takes head g (v9: no block barriers).
__device__ __forceinline__ void merge_splits(const TqParams& p, uint8_t* smem, int b, int q_head0,
                                             int gn, int64_t qrow) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* wts = reinterpret_cast<float*>(smem);  // [8][n_total]: m, then normalised weights
  float* lsum = wts + 8 * p.n_total;            // [8][n_total]
  const int64_t row0 = (int64_t(b) * p.n_head + q_head0) * p.n_total;
  if (tid < gn * (D / 4)) {
    const int g = warp;
    const float4* pa =
        reinterpret_cast<const float4*>(p.part_acc + (row0 + int64_t(g) * p.n_total) * D) + lane;
    const float2* pml = reinterpret_cast<const float2*>(p.part_ml) + row0 + g * p.n_total;
    merge_head(
        p, p.n_total, [&](int s) { return __ldcg(pa + int64_t(s) * (D / 4)); },
        [&](int s) { return __ldcg(pml + s); }, wts + g * p.n_total, lsum + g * p.n_total,
        p.out + (qrow * p.n_head + q_head0 + g) * D);
  }
}

}  // namespace tq::cuda::tq128
