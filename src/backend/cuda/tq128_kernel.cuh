// The TurboQuant 4-bit decode attention kernel for head_dim 128 (one template, two forms): split-K
// over the context with codes and scales staged in shared memory by bulk copies (one thread,
// mbarrier per slot), tensor-core scores (v16: tokens as the MMA rows, P transposed to the PV
// operand by movmatrix) and PV on table-decoded codes (a per-lane 64 KB byte -> half2 table, one
// block of 12 warps per SM), an optional exact tail (rotated f32 rows) shared out
// among the split blocks, and the cross-split merge + inverse V rotation fused into the last block
// of each (sequence, kv head) or into a cluster of its split blocks. The long form has 6 slots (5
// stages in flight); v13's short form, for batch-1 short contexts, one slot and the tail rows
// preloaded (125 KB), and (v14) it may encode the step's deferred record in two idle warps.
// Included by decode_tq128.cu only (the launch, form and split choices). Versions v4-v16 and what
// each measured: bench/results/cuda-notes.md.
#pragma once
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/cluster.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/decode_seq.cuh"
#include "backend/cuda/tq128_merge.cuh"
#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_encode_vec.cuh"

namespace tq::cuda::tq128 {

template <int kStages>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) tq128_kernel(const TqParams p) {
  constexpr int TW = 32;  // tokens per warp per stage (v8; v7's 16 was dropped in session 12)
  static_assert(kStages == kStagesLong || kStages == kStagesShort, "stage slots");
  constexpr int kScratchBytes = scratch_bytes(kStages);
  constexpr bool kShort = kStages == kStagesShort;
  constexpr int kPre = pre_rows(kStages);
  // Stages issued before the queries are in registers: all but the last slot, which holds them
  // (long form), or all (short form: the queries have their own region).
  constexpr int kEarlySlots = kShort ? kStages : kStages - 1;
  constexpr int kTailClasses = 4;  // short form: at most this many warps per head in the tail
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ uint32_t released[kStages];  // warps done with each slot, counted up forever
  uint8_t* stages = smem + kLutBytes;
  // Rotated queries [8][D]: in the last stage slot, which the prologue does not load (long form),
  // or past the preloaded tail rows (short form).
  float* qs = kShort ? reinterpret_cast<float*>(smem + kScratchBytes) + (2 * kPre + 8) * D
                     : reinterpret_cast<float*>(stages + (kStages - 1) * kStageBytes);
  // The same queries with 16-byte chunk c of row g at c ^ g (v9): the per-lane A-fragment loads
  // below then hit 8 different bank groups (they were all in one: a 32-way conflict, ~3 us).
  float* qsw = qs + 8 * D;
  const int swz = p.swizzle ? 0xe : 0;

  const int split = blockIdx.x, hk = blockIdx.y / p.n_sub, sub = blockIdx.y % p.n_sub;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const int g0 = sub * 8, gn = min(8, p.G - g0);
  if (p.mode == 3) return;  // probe: launch cost only
  stamp(p, 0);
  // v12: what no previous kernel writes comes before griddepcontrol.wait (which orders reads
  // after the previous kernel in the stream; a no-op without programmatic dependent launch): the
  // table (from the parameters) and, at batch 1 with the lengths by value, the first stages of
  // the records the host says the previous kernel does not write (p.early rows). With PDL they
  // overlap the previous kernel's end and the launch gap. Otherwise the queries are loaded first,
  // so that their latency hides behind the table build. Warp 0 leaves the table to the others
  // and issues the stage loads. (A warp of its own for the loads was tried: -10% at batch 8.)
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(&full[i], 1), released[i] = 0;
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  auto build_table = [&] {  // 32 copies of each entry, 16 bytes per store
    for (int i = tid - 32; i < 256 * 8; i += kThreads - 32) {
      if (i < 0) break;
      const int e = i >> 3;
      const uint32_t h = pack_half2(p.cent[e & 15], p.cent[e >> 4]);
      reinterpret_cast<uint4*>(smem + e * kLutStride)[i & 7] = make_uint4(h, h, h, h);
    }
  };
  // Sequence b's storage: its descriptor (batched form) or b * seq_stride into the arrays.
  SeqStore sq{p.k, p.v, p.ks, p.vs, p.kt, p.vt, int64_t(b) * p.seq_stride, p.head_stride,
              int64_t(b) * p.t_seq_stride, p.t_head_stride, b, p.len1, 0};
  const bool early = p.len1 >= 0 && p.early > 0;  // (batch 1 without descriptors)
  int s0 = 0, end = 0, n_it = 0;  // this split's tokens [s0, end), in n_it stages
  const uint8_t* krow = nullptr;
  const uint8_t* vrow = nullptr;
  const uint16_t* ksb = nullptr;
  const uint16_t* vsb = nullptr;
  auto place = [&] {
    const int units = (sq.len + 7) / 8;
    s0 = 8 * int(int64_t(units) * split / p.n_split);
    end = min(sq.len, 8 * int(int64_t(units) * (split + 1) / p.n_split));
    // Probe TQ_DECODE_MODE=2: no stage loads and no math (prologue, merge and launch chain only).
    n_it = end > s0 && p.mode != 2 ? (end - s0 + kStageTok - 1) / kStageTok : 0;
    const int64_t base = sq.base + int64_t(hk) * sq.head_stride;
    krow = sq.k + base * kRow;
    vrow = sq.v + base * kRow;
    ksb = sq.ks + base;
    vsb = sq.vs + base;
  };

  // Stage it (tokens s0 + 64 it ..): K rows, V rows, K scales, V scales as 4 bulk copies issued
  // by thread 0 on barrier full[it % kStages]. Scales are copied in whole 8-token groups (16 B);
  // rows past `end` keep stale bytes, masked below.
  auto issue = [&](int it, int slot) {  // any one thread
    if (it >= n_it) return;
    const int tok = s0 + it * kStageTok;
    const int rows = min(kStageTok, end - tok), srows = (rows + 7) & ~7;
    uint8_t* st = stages + slot * kStageBytes;
    mbar_expect_tx(&full[slot], uint32_t(2 * rows * kRow + 2 * srows * 2));
    bulk_copy(st, krow + int64_t(tok) * kRow, uint32_t(rows * kRow), &full[slot]);
    bulk_copy(st + kStageTok * kRow, vrow + int64_t(tok) * kRow, uint32_t(rows * kRow), &full[slot]);
    bulk_copy(st + 2 * kStageTok * kRow, ksb + tok, uint32_t(srows * 2), &full[slot]);
    bulk_copy(st + 2 * kStageTok * kRow + kStageTok * 2, vsb + tok, uint32_t(srows * 2), &full[slot]);
  };
  int issued = 0;  // thread 0: stages issued before the wait
  if (early) {
    place();
    // A stage goes early when its scale groups (whole 8-token groups) end within p.early rows,
    // up to p.max_early of them (v15: 2; v12-v14 all 5 of the long form's: their copies, 16 MB at
    // batch 1, still in flight when the previous kernel ends, held back this launch's release:
    // B=1 32K 18.1 -> 17.1 us, 128K 44.8 -> 44.0).
    if (tid == 0)
      for (; issued < min(kEarlySlots, p.max_early) && issued < n_it; ++issued) {
        const int tok = s0 + issued * kStageTok;
        if (tok + ((min(kStageTok, end - tok) + 7) & ~7) > p.early) break;
        issue(issued, issued);
      }
    build_table();
  }
  stamp(p, 1);
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (p.seqs) {
    sq = seq_store(p.seqs[b]);
  } else {
    if (!early) sq.len = p.len1 >= 0 ? p.len1 : p.lens[b];
    if (p.kt) sq.tail_len = p.tlen1 >= 0 ? p.tlen1 : p.tlens ? p.tlens[b] : 0;
  }
  const int q_head0 = hk * p.G + g0;
  const float* qsrc = p.q + (sq.row * p.n_head + q_head0) * D;
  float qx[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // warp g < 8: head g's coordinates 4 lane ..
  if (warp < gn) {
    const float4 v = reinterpret_cast<const float4*>(qsrc + warp * D)[lane];
    qx[0] = v.x, qx[1] = v.y, qx[2] = v.z, qx[3] = v.w;
  }
  if (!early) {
    build_table();
    place();
  }

  // Exact tail (v10): split s takes tail rows [tr0, tr1) after its codes. Up to kPre of them (8;
  // short form 16) are loaded at the start into their own region (their latency hides behind the
  // codes); more (long form) go in 32-row chunks double-buffered in stage slots 0-2 (free after
  // the loop).
  const int tr0 = int(int64_t(sq.tail_len) * split / p.n_split);
  const int tr1 = int(int64_t(sq.tail_len) * (split + 1) / p.n_split);
  const bool pre = tr1 - tr0 <= kPre;
  if (kShort && (!pre || n_it > kStages)) __trap();  // the host picks the short form only then
  const int n_mine = tr1 <= tr0 ? 0 : pre ? 1 : (tr1 - tr0 + 31) / 32;  // chunks
  const int64_t tb = sq.tail_base + int64_t(hk) * sq.tail_head_stride;
  float* tbuf = reinterpret_cast<float*>(smem + kLutBytes);  // [2][K, V][32][D] (long form)
  float* tpre = reinterpret_cast<float*>(smem + kScratchBytes);  // [K, V][kPre][D]
  float* qkeep = tpre + 2 * kPre * D;  // the rotated queries [8][D], kept for the tail
  // Chunk k of this block's rows into `dst` ([K, V][cap][D]); one cp.async group.
  auto load_rows = [&](int k, float* dst, int cap) {
    if (k < n_mine)
      for (int i = tid; i < 2 * cap * (D / 4); i += kThreads) {
        const int which = i / (cap * D / 4), r = (i / (D / 4)) % cap, c = i % (D / 4);
        const int t = tr0 + 32 * k + r;
        if (t < tr1)
          cp_async16(dst + (which * cap + r) * D + c * 4,
                     (which ? sq.vt : sq.kt) + (tb + t) * D + c * 4);
      }
    cp_commit();
  };
  auto issue_tail = [&](int k) { load_rows(k, tbuf + (k & 1) * 2 * 32 * D, 32); };
  if (pre) load_rows(0, tpre, kPre);
  if (tid == 0)
    for (int i = issued; i < kEarlySlots; ++i) issue(i, i);
  stamp(p, 2);
  // y = D2 H D1 q / sqrt(D) in registers: warp g takes head g (v9). A third copy is kept for the
  // exact tail: the last stage slot, where the queries live, takes codes from the 6th stage on.
  if (warp < 8) {
    const int g = warp;
    const float sq = p.qscale * rsqrtf(float(D));
    float e[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = 4 * lane + i;
      e[i] = tq_sign_set(p.ksign_in, c) ? -qx[i] : qx[i];
    }
    fwht128(e, lane);
#pragma unroll
    for (int i = 0; i < 4; ++i) e[i] *= tq_sign_set(p.ksign_out, 4 * lane + i) ? -sq : sq;
    const float4 v = make_float4(e[0], e[1], e[2], e[3]);
    reinterpret_cast<float4*>(qs + g * D)[lane] = v;
    reinterpret_cast<float4*>(qsw + g * D)[lane ^ g] = v;
    reinterpret_cast<float4*>(qkeep + g * D)[lane] = v;
  }
  __syncthreads();

  ColumnSoftmax sm;  // heads 2 tig and 2 tig + 1
  float acc[8][4];
#pragma unroll
  for (int m = 0; m < 8; ++m) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;

  {
    uint32_t qa0[8], qa2[8];
#pragma unroll
    for (int kc = 0; kc < 8; ++kc) {
      const int p0 = tig * (D / 8) + 2 * kc;
      if (swz) {
        const float4 v = reinterpret_cast<const float4*>(qsw + gid * D)[(8 * tig + kc) ^ gid];
        qa0[kc] = pack_half2(v.x, v.y);
        qa2[kc] = pack_half2(v.z, v.w);
      } else {  // v8 and before
        const float* row = qs + gid * D;
        qa0[kc] = pack_half2(row[2 * p0], row[2 * p0 + 1]);
        qa2[kc] = pack_half2(row[2 * p0 + 2], row[2 * p0 + 3]);
      }
    }
    __syncthreads();  // the queries are in registers: their slot takes the last prologue stage
    stamp(p, 3);
    stamp(p, 4);  // (again at the first stage's arrival, if there is one)
    if (!kShort && tid == 0) issue(kStages - 1, kStages - 1);
    const uint32_t lane4 = uint32_t(lane) * 4u;
    // No block-wide barrier per stage: each warp waits for its data only, and the last warp to
    // release a slot refills it with the stage kStages ahead. TW = 32 (v8): warp group grp takes
    // the stages j = grp (mod kGroups), each warp TW tokens of it (one max / rescale per TW).
    constexpr int kPerStage = kStageTok / TW, kGroups = kWarps / kPerStage;
    const int grp = warp / kPerStage, tw = (warp % kPerStage) * TW;
    int slot = grp;
    uint32_t phase = 0;
    for (int it = grp; it < n_it; it += kGroups) {
      mbar_wait(&full[slot], phase);
      if (it == 0) stamp(p, 4);
      const uint8_t* st = stages + slot * kStageBytes;
      const uint16_t* kss = reinterpret_cast<const uint16_t*>(st + 2 * kStageTok * kRow);
      const uint16_t* vss = kss + kStageTok;
      const int base_t = s0 + it * kStageTok, lim = end - base_t;  // rows r < lim are valid
      do {
      if (tw >= lim || p.mode == 1) break;
      // Scores S[token, g] (v16: tokens as MMA rows, 16 a tile, so the 4 heads fill half of n8
      // instead of a quarter of m16: half the score MMAs). Tile t's row j is token
      // tw + 16 t + pi(j) (+ 8 for rows 8-15): lane (gid, tig) holds tokens ra = .. + pi(gid) and
      // rb = ra + 8, heads 2 tig, 2 tig + 1 (c0, c1 of ra; c2, c3 of rb).
      constexpr int NM = TW / 16;
      float s[NM][4];
      float2 vsc[NM];  // V scales of ra, rb
#pragma unroll
      for (int t = 0; t < NM; ++t) {
        const int ra = tw + 16 * t + pi(gid), rb = ra + 8;
        const uint4 ka = *reinterpret_cast<const uint4*>(st + ra * kRow + tig * 16);
        const uint4 kb = *reinterpret_cast<const uint4*>(st + rb * kRow + tig * 16);
        const uint32_t wa4[4] = {ka.x, ka.y, ka.z, ka.w}, wb4[4] = {kb.x, kb.y, kb.z, kb.w};
        // Two accumulation chains (even / odd kc): half the dependent MMA latency.
        float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < 8; ++kc) {
          const uint32_t wa = wa4[kc / 2], wb = wb4[kc / 2];
          const bool hi = kc & 1;
          const uint32_t a0 = hi ? lut_byte<2>(smem, lane4, wa) : lut_byte<0>(smem, lane4, wa);
          const uint32_t a1 = hi ? lut_byte<2>(smem, lane4, wb) : lut_byte<0>(smem, lane4, wb);
          const uint32_t a2 = hi ? lut_byte<3>(smem, lane4, wa) : lut_byte<1>(smem, lane4, wa);
          const uint32_t a3 = hi ? lut_byte<3>(smem, lane4, wb) : lut_byte<1>(smem, lane4, wb);
          mma16816<false>(hi ? s2 : s[t], a0, a1, a2, a3, qa0[kc], qa2[kc]);
        }
        const float ksa = __half2float(*reinterpret_cast<const __half*>(kss + ra));
        const float ksb = __half2float(*reinterpret_cast<const __half*>(kss + rb));
        vsc[t] = make_float2(__half2float(*reinterpret_cast<const __half*>(vss + ra)),
                             __half2float(*reinterpret_cast<const __half*>(vss + rb)));
        s[t][0] = (s[t][0] + s2[0]) * ksa;
        s[t][1] = (s[t][1] + s2[1]) * ksa;
        s[t][2] = (s[t][2] + s2[2]) * ksb;
        s[t][3] = (s[t][3] + s2[3]) * ksb;
        if (lim < tw + TW) {  // the split's last tile: scores -inf and V scales 0 past the end
          if (ra >= lim) s[t][0] = s[t][1] = kNegInf, vsc[t].x = 0.0f;
          if (rb >= lim) s[t][2] = s[t][3] = kNegInf, vsc[t].y = 0.0f;
        }
      }
      uint32_t pb[2 * NM];  // the PV B operands: P^T (tokens x heads), by transposing 8x8 tiles
      const float2 c = sm.step(
          s, vsc, pb, [](float x) { return fast_exp2(x); },
          [](float pa, float pb_, float v) { return pack_half2(pa * v, pb_ * v); });
      const float ca = c.x, cb = c.y;
      if (__any_sync(0xffffffffu, ca != 1.0f || cb != 1.0f)) {  // only when a running max moved
#pragma unroll
        for (int m = 0; m < 8; ++m)
          acc[m][0] *= ca, acc[m][1] *= cb, acc[m][2] *= ca, acc[m][3] *= cb;
      }
#pragma unroll
      for (int hh = 0; hh < TW / 16; ++hh) {
        // V^T A operand: k index 2tig + (q & 1) + 8 (q >> 1) -> token 16 hh + 8 (q >> 1) + pi(..).
        uint2 vw[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = tw + 16 * hh + (q >> 1) * 8 + pi(2 * tig + (q & 1));
          vw[q] = *reinterpret_cast<const uint2*>(st + kStageTok * kRow + r * kRow + gid * 8);
        }
        // Nibble interleave (v8): byte i of e[..] holds (token q0's nibble, token q1's nibble) of
        // dim 2i (even words) or 2i + 1 (odd words), so one lookup gives an A half2 directly.
        uint32_t e[8];  // [x / y word][token pair 01 / 23][lo / hi dims]
#pragma unroll
        for (int wy = 0; wy < 2; ++wy)
#pragma unroll
          for (int pr = 0; pr < 2; ++pr) {
            const uint32_t w0 = wy ? vw[2 * pr].y : vw[2 * pr].x;
            const uint32_t w1 = wy ? vw[2 * pr + 1].y : vw[2 * pr + 1].x;
            e[wy * 4 + pr * 2] = (w0 & 0x0f0f0f0fu) | ((w1 << 4) & 0xf0f0f0f0u);
            e[wy * 4 + pr * 2 + 1] = ((w0 >> 4) & 0x0f0f0f0fu) | (w1 & 0xf0f0f0f0u);
          }
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          uint32_t x[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const uint32_t w = e[(m >> 2) * 4 + q];
            switch (m & 3) {
              case 0: x[q] = lut_byte<0>(smem, lane4, w); break;
              case 1: x[q] = lut_byte<1>(smem, lane4, w); break;
              case 2: x[q] = lut_byte<2>(smem, lane4, w); break;
              default: x[q] = lut_byte<3>(smem, lane4, w); break;
            }
          }
          mma16816<false>(acc[m], x[0], x[1], x[2], x[3], pb[2 * hh], pb[2 * hh + 1]);
        }
      }
      } while (false);
      __syncwarp();  // the whole warp has read the slot
      if (lane == 0 && atomicAdd(&released[slot], 1u) % kPerStage == kPerStage - 1)
        issue(it + kStages, slot);
      slot += kGroups;
      if (slot >= kStages) slot -= kStages, phase ^= 1u;
    }
    // Short form: the step's deferred records (head hk's key and value) by split 0's last two
    // warps, which have no stage (the second warp group's first is stage 1), beside the loop.
    if (kShort && p.has_rec && split == 0 && sub == 0 && warp >= kWarps - 2)
      encode_record(p.rec, hk, warp == kWarps - 1, lane);
  }
  cp_wait<0>();
  __syncthreads();  // stages and the table are free from here: reuse them as scratch
  stamp(p, 5);
  if (p.mode == 4) {  // probe: no partials and no merge
    for (int k = 6; k < kStamps; ++k) stamp(p, k);
    return;
  }

  // Per-warp partials [2][kWarps][8][D] (codes, then the exact tail; columns by wcol(), v9), each
  // half followed by its (m, l) [kWarps][8] x 2. The tail half lies past the tail chunk buffers.
  constexpr int kPart = kWarps * 8 * D + 2 * kWarps * 8;  // floats
  float* wacc = reinterpret_cast<float*>(smem);
  float* wm = wacc + kWarps * 8 * D;
  float* wl = wm + kWarps * 8;
  // The tail's partials: past the chunk buffers, or in the short form (every row preloaded, no
  // chunk buffers) at the stages' start.
  float* tacc = reinterpret_cast<float*>(smem + kLutBytes) + (kShort ? 0 : 4 * 32 * D);
  float* tm = tacc + (kShort ? kTailClasses * 8 : kWarps * 8) * D;  // (short form: per class)
  float* tl = tm + (kShort ? kTailClasses * 8 : kWarps * 8);
  static_assert(kShort ||
                    kLutBytes + (4 * 32 * D + kPart) * 4 <= (kStages - 1) * kStageBytes + kLutBytes,
                "tail buffers and partials must stay clear of the queries in the last slot");
  static_assert(kTailClasses * 8 * (D + 2) * 4 <= kStagesShort * kStageBytes,
                "the short form's tail partials fit");
  static_assert(kPart * 4 <= kLutBytes, "the codes' partials fit in the table's bytes");
  {
    sm.store(wm, wl, warp * 8, gid, tig);
    float* w0 = wacc + (warp * 8 + 2 * tig) * D;
    float* w1 = w0 + D;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int j = (D / 16) * gid + m;
      if (swz) {  // float2 stores, 16 distinct 8-byte bank pairs per half warp
        const int c = wcol(2 * tig, 2 * j, swz);
        *reinterpret_cast<float2*>(w0 + c) = make_float2(acc[m][0], acc[m][2]);
        *reinterpret_cast<float2*>(w1 + c) = make_float2(acc[m][1], acc[m][3]);
      } else {  // v8 and before: every lane of a store in 2 banks (16-way conflict, ~3 us)
        w0[2 * j] = acc[m][0];
        w1[2 * j] = acc[m][1];
        w0[2 * j + 1] = acc[m][2];
        w1[2 * j + 1] = acc[m][3];
      }
    }
  }
  // Short form: the tail's row classes (below), each one partial for all heads.
  const int n_cls = kShort ? min(kTailClasses, max(1, kWarps / gn)) : 0;
  if (kShort && n_mine > 0) {
    // v13: warp w takes head w % gn over row class w / gn (tail_short, tq128_merge.cuh).
    if (warp < n_cls * gn)
      tail_short(tpre, kPre, qkeep, tr1 - tr0, warp % gn, warp / gn, n_cls, swz, tacc, tm, tl);
  } else if (n_mine > 0) {
    if (!pre) issue_tail(0), issue_tail(1);
#pragma unroll
    for (int m = 0; m < 8; ++m) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;
    // Exact tail: rows already rotated (R_k k, R_v v as f32); in each chunk warp w takes rows
    // 8w .. 8w + 7; lane holds coordinates 4 lane .. 4 lane + 3; acc[g] = the per-head sums.
    float mg[8], lg[8];
#pragma unroll
    for (int g = 0; g < 8; ++g) mg[g] = kNegInf, lg[g] = 0.0f;
    for (int k = 0; k < n_mine; ++k) {
      if (!pre) {  // (the prefetched rows arrived before the barrier after the loop)
        cp_wait<1>();
        __syncthreads();
      }
      const float* kb = pre ? tpre : tbuf + (k & 1) * 2 * 32 * D;
      const float* vb = kb + (pre ? kPreRows : 32) * D;
      // Warp w: rows 8 (w % 4) .. + 7 together (independent reductions, one rescale per chunk)
      // for the heads g with g % (kWarps / 4) == w / 4.
      const int rbeg = (warp & 3) * 8, nr = min(8, tr1 - (tr0 + 32 * k) - rbeg);
      if (nr > 0) {
        float4 kv[8], vv[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {  // rows past the tail hold stale bytes (maybe NaN): zeros
          const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          kv[r] = r < nr ? reinterpret_cast<const float4*>(kb + (rbeg + r) * D)[lane] : z;
          vv[r] = r < nr ? reinterpret_cast<const float4*>(vb + (rbeg + r) * D)[lane] : z;
        }
#pragma unroll
        for (int g = 0; g < 8; ++g) {
          if (g >= gn) break;
          if (g % (kWarps / 4) != warp / 4) continue;
          const float4 qv = reinterpret_cast<const float4*>(qkeep + g * D)[lane];
          float d[8];
#pragma unroll
          for (int r = 0; r < 8; ++r)
            d[r] = qv.x * kv[r].x + qv.y * kv[r].y + qv.z * kv[r].z + qv.w * kv[r].w;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int r = 0; r < 8; ++r) d[r] += __shfl_xor_sync(0xffffffffu, d[r], o);
          float mx = kNegInf;
#pragma unroll
          for (int r = 0; r < 8; ++r) mx = r < nr ? fmaxf(mx, d[r]) : mx;
          const float mn = fmaxf(mg[g], mx);
          const float c = exp2f(mg[g] - mn);
          float4 a = make_float4(acc[g][0] * c, acc[g][1] * c, acc[g][2] * c, acc[g][3] * c);
          float l = lg[g] * c;
#pragma unroll
          for (int r = 0; r < 8; ++r) {
            const float e = r < nr ? exp2f(d[r] - mn) : 0.0f;
            l += e;
            a.x += e * vv[r].x, a.y += e * vv[r].y, a.z += e * vv[r].z, a.w += e * vv[r].w;
          }
          acc[g][0] = a.x, acc[g][1] = a.y, acc[g][2] = a.z, acc[g][3] = a.w;
          lg[g] = l;
          mg[g] = mn;
        }
      }
      if (!pre) {
        __syncthreads();
        issue_tail(k + 2);
      }
    }
    cp_wait<0>();
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      float* row = tacc + (warp * 8 + g) * D;
      *reinterpret_cast<float2*>(row + wcol(g, 4 * lane, swz)) = make_float2(acc[g][0], acc[g][1]);
      *reinterpret_cast<float2*>(row + wcol(g, 4 * lane + 2, swz)) =
          make_float2(acc[g][2], acc[g][3]);
      if (lane == 0) tm[warp * 8 + g] = mg[g], tl[warp * 8 + g] = lg[g];
    }
  }
  __syncthreads();
  // The block's partial: the codes' warps, and with tail rows here the tail's warps too. With
  // the cluster merge (v11) it stays in this block's shared memory (the exact-tail prefetch
  // region, free from here), else it goes to the global workspace. Weights first (one warp per
  // head), then a float4 of columns per thread (was: one column per thread, each recomputing
  // the maximum and the weights: 1.35 us at batch 1).
  float* bpart = tpre;            // [8][D]
  float* bml = tpre + 8 * D;      // [8][2]: (m, l)
  float* wgt = bml + 16;          // [2 * kWarps][8]: each warp partial's weight, per head
  // Warp partials: the codes', then the tail's (the short form's: one per row class).
  const int nj = kShort ? kWarps + (n_mine > 0 ? n_cls : 0) : (n_mine > 0 ? 2 : 1) * kWarps;
  stamp(p, 6);
  if (warp < gn) {  // warp g: head g's maximum, weights and sum over the nj partials (v11)
    const int g = warp, j = lane;
    const float m = j < nj ? (j < kWarps ? wm : tm)[(j % kWarps) * 8 + g] : kNegInf;
    float M = m;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float e = M == kNegInf || j >= nj ? 0.0f : exp2f(m - M);
    float l = j < nj ? e * (j < kWarps ? wl : tl)[(j % kWarps) * 8 + g] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (j < nj) wgt[j * 8 + g] = e;
    if (lane == 0) bml[2 * g] = M, bml[2 * g + 1] = l;
  }
  __syncthreads();
  stamp(p, 7);
  if (tid < gn * (D / 4)) {  // head g = warp, columns 4 lane .. + 3: a float4 of each partial
    const int g = warp, c = 4 * lane;
    const int x = wcol(g, c, swz) ^ c;  // the float2 at c sits at c ^ x, the one at c + 2 at ^ 2
    const int off = g * D + ((c ^ x) & ~3);
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < nj; ++j) {
      const float* pa = (j < kWarps ? wacc : tacc) + (j % kWarps) * 8 * D;
      const float4 v = *reinterpret_cast<const float4*>(pa + off);
      const float e = wgt[j * 8 + g];
      a.x += e * v.x, a.y += e * v.y, a.z += e * v.z, a.w += e * v.w;
    }
    if (x & 2) a = make_float4(a.z, a.w, a.x, a.y);
    if (p.cluster) {
      reinterpret_cast<float4*>(bpart + g * D)[lane] = a;
    } else {
      const int64_t slot = (int64_t(b) * p.n_head + q_head0 + g) * p.n_total + split;
      reinterpret_cast<float4*>(p.part_acc + slot * D)[lane] = a;
      if (lane == 0) reinterpret_cast<float2*>(p.part_ml)[slot] = make_float2(bml[2 * g], bml[2 * g + 1]);
    }
  }

  stamp(p, 8);
  if (p.cluster) {
    // v11: one barrier makes every split's partial visible across the cluster (its rank is the
    // split: the cluster spans grid x); head g is merged by warp g / n of block g % n, reading
    // the n partials from the blocks' shared memory; a second barrier keeps every block's
    // partial alive until its readers are done.
    cluster_sync();
    stamp(p, 9);
    stamp(p, 10);  // (again in the merge, once the splits' partials have arrived)
    const int n = p.n_total, g = split + warp * n;
    if (warp * n < gn && g < gn) {
      float* scratch = reinterpret_cast<float*>(smem) + warp * 2 * n;  // the table: free
      const float* col = bpart + g * D + 4 * lane;
      const float* ml = bml + 2 * g;
      merge_head(
          p, n, [&](int s) { return dsmem_ld4(dsmem_addr(col, uint32_t(s))); },
          [&](int s) { return dsmem_ld2(dsmem_addr(ml, uint32_t(s))); }, scratch, scratch + n,
          p.out + (sq.row * p.n_head + q_head0 + g) * D);
    }
    cluster_sync();
    stamp(p, 11);
    return;
  }

  // The last block of this (sequence, kv head, subgroup) merges all splits.
  // (v11: one thread's acquire-release atomic after the barrier; was a fence by every thread,
  // each an L1 invalidate: ~0.5 us.)
  __shared__ int s_last;
  __syncthreads();
  if (p.mode == 6) {  // probe: partials out, no counter and no merge
    for (int k = 9; k < kStamps; ++k) stamp(p, k);
    return;
  }
  const int cidx = (b * p.n_head_kv + hk) * p.n_sub + sub;
  if (tid == 0) s_last = atomic_add_acq_rel(p.counters + cidx, 1) == p.n_total - 1;
  __syncthreads();
  stamp(p, 9);
  stamp(p, 10);  // (again in the merge, once the splits' partials have arrived)
  if (s_last) {
    if (p.mode != 5) merge_splits(p, smem, b, q_head0, gn, sq.row);  // tq128_merge.cuh
    if (tid == 0) p.counters[cidx] = 0;  // ready for the next launch
  }
  stamp(p, 11);
}

}  // namespace tq::cuda::tq128
