// Split-K decode attention on tensor cores for dense bf16 and TurboQuant 4-bit K/V: one block per
// (sequence, kv head, <=8-head query subgroup, context split), then a merge kernel per query head.
//
// Per warp and tile of tokens, scores are S[tok, g] = K[tok, :] . Q[g, :]^T (m16n8k16: rows = 16
// tokens, cols = the group's query heads, k = 16 coordinates) and the output is
// O^T[coord, g] += V^T[coord, tok] . P^T[tok, g] (rows = 16 coordinates, cols = heads, k = 16
// tokens): each 8x8 tile of P reaches the P^T operand by one movmatrix transpose. Each
// lane reads its tokens' bytes with 8/16-byte loads; coordinates are permuted inside the MMAs so
// that a lane's bytes are contiguous (the permutation is applied to Q and undone on output).
// TurboQuant codes become MMA operands through a byte -> half2 table (two centroids per byte),
// replicated per lane in shared memory so lookups never conflict; the query is rotated once per
// block and the output rotated back once per head in the merge.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/decode_seq.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tq_hadamard.cuh"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -INFINITY;

struct DecodeParams {
  const float* q;
  float* part_acc;  // [B][n_head][n_split][D]
  float* part_ml;   // [B][n_head][n_split][2]
  const uint8_t* k;
  const uint8_t* v;
  const uint16_t* ks;
  const uint16_t* vs;
  int64_t seq_stride, head_stride;
  const int32_t* lens;
  const DecodeSeqDesc* seqs;  // batched form: per-sequence pointers (then k .. lens unused)
  int n_head, G, n_split, n_sub;
  float qscale;  // softmax scale * log2(e)
  float cent[16];  // the shared K/V codebook
  uint32_t ksign_in[8], ksign_out[8];
};


template <int D, bool TQ>
struct Shape {
  static constexpr int KC = D / 16;            // score k-chunks = PV m-tiles
  static constexpr int TILE = TQ ? 32 : 16;    // tokens per warp iteration
  static constexpr int NT = TILE / 8;          // score n-tiles
  static constexpr int KS = TILE / 16;         // PV k-steps
  static constexpr int KW = TQ ? D / 32 : D / 8;   // K words per lane per token
  static constexpr int VW = TQ ? D / 64 : D / 16;  // V words per lane per token
  static constexpr int TOKEN_BYTES = TQ ? D / 2 : D * 2;
  static constexpr int LUT_WORDS = TQ ? 256 * 32 : 0;
  static constexpr size_t smem_bytes() {
    return size_t(LUT_WORDS) * 4 + size_t(8 * D) * 4 + size_t(kWarps * 8 * D) * 4 +
           size_t(2 * kWarps * 8) * 4;
  }
};

template <int D, bool TQ>
__global__ void __launch_bounds__(kThreads, kDecodeBlocksPerSm) decode_kernel(const DecodeParams p) {
  using S = Shape<D, TQ>;
  extern __shared__ uint32_t smem[];
  // TQ: [256][32] half2 (c[lo nibble], c[hi nibble]), one copy per lane; K and V share it
  // (their codebooks depend only on (head_dim, bits), checked at launch).
  uint32_t* lut = smem;
  float* qs = reinterpret_cast<float*>(smem + S::LUT_WORDS);  // [8][D]
  float* wacc = qs + 8 * D;                                    // [kWarps][8][D]
  float* wm = wacc + kWarps * 8 * D;                           // [kWarps][8]
  float* wl = wm + kWarps * 8;

  // Launched with PDL: q, the cache's new rows and the lengths come from the previous kernels.
  // The merge may launch as soon as every block is here (released before the wait, so that the
  // output projection after it starts prefetching its weights during the attention).
  pdl_release();
  pdl_wait();
  const int split = blockIdx.x, hk = blockIdx.y / p.n_sub, sub = blockIdx.y % p.n_sub;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const int g0 = sub * 8, gn = min(8, p.G - g0);
  // Sequence b's storage: its descriptor (batched form) or b * seq_stride into the arrays.
  const SeqStore sq = p.seqs ? seq_store(p.seqs[b])
                             : SeqStore{p.k, p.v, p.ks, p.vs, nullptr, nullptr, int64_t(b) * p.seq_stride,
                                        p.head_stride, 0, 0, b, p.lens[b], 0};
  const int L = sq.len;
  const int n_tiles = (L + S::TILE - 1) / S::TILE;
  const int tile_begin = int(int64_t(n_tiles) * split / p.n_split);
  const int tile_end = int(int64_t(n_tiles) * (split + 1) / p.n_split);

  if constexpr (TQ) {
    for (int i = tid; i < 256 * 32; i += kThreads) {
      const int e = i >> 5;
      lut[i] = pack_half2(p.cent[e & 15], p.cent[e >> 4]);
    }
  }
  const int q_head0 = hk * p.G + g0;
  const float* qsrc = p.q + (sq.row * p.n_head + q_head0) * D;
  for (int i = tid; i < 8 * D; i += kThreads) qs[i] = i / D < gn ? qsrc[i] : 0.0f;
  __syncthreads();
  if constexpr (TQ) {  // y = D2 H D1 q / sqrt(D), all rows at once
    for (int i = tid; i < 8 * D; i += kThreads)
      if (tq_sign_set(p.ksign_in, i % D)) qs[i] = -qs[i];
    __syncthreads();
    for (int h = 1; h < D; h <<= 1) {
      for (int i = tid; i < 8 * D / 2; i += kThreads) {
        const int g = i / (D / 2), r = i % (D / 2);
        const int j = (r / h) * 2 * h + (r % h);
        float* row = qs + g * D;
        const float x = row[j], y = row[j + h];
        row[j] = x + y;
        row[j + h] = x - y;
      }
      __syncthreads();
    }
    const float s = p.qscale * rsqrtf(float(D));
    for (int i = tid; i < 8 * D; i += kThreads)
      qs[i] *= tq_sign_set(p.ksign_out, i % D) ? -s : s;
  } else {
    for (int i = tid; i < 8 * D; i += kThreads) qs[i] *= p.qscale;
  }
  __syncthreads();

  // Query fragments: k-chunk kc, lane tig covers coordinate pairs tig * D/8 + 2kc + {0, 1}.
  uint32_t qa0[S::KC], qa2[S::KC];
#pragma unroll
  for (int kc = 0; kc < S::KC; ++kc) {
    const int p0 = tig * (D / 8) + 2 * kc;
    const float* row = qs + gid * D;
    if constexpr (TQ) {
      qa0[kc] = pack_half2(row[2 * p0], row[2 * p0 + 1]);
      qa2[kc] = pack_half2(row[2 * p0 + 2], row[2 * p0 + 3]);
    } else {
      qa0[kc] = pack_bf162(row[2 * p0], row[2 * p0 + 1]);
      qa2[kc] = pack_bf162(row[2 * p0 + 2], row[2 * p0 + 3]);
    }
  }

  const int64_t base = sq.base + int64_t(hk) * sq.head_stride;
  const uint8_t* kbase = sq.k + base * S::TOKEN_BYTES + tig * (S::KW * 4);
  const uint8_t* vbase = sq.v + base * S::TOKEN_BYTES + gid * (S::VW * 4);
  const uint16_t* ksb = TQ ? sq.ks + base : nullptr;
  const uint16_t* vsb = TQ ? sq.vs + base : nullptr;
  const uint32_t* my_lut = lut + lane;

  ColumnSoftmax sm;  // heads 2 tig and 2 tig + 1
  float acc[S::KC][4];
#pragma unroll
  for (int m = 0; m < S::KC; ++m) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;

  // One tile's raw bytes; the next tile's loads are issued before the current one is used, so
  // each warp keeps two tiles of K/V in flight.
  struct TileRegs {
    uint32_t kw[S::NT][S::KW];
    uint32_t vw[S::KS][4][S::VW];
    uint16_t ks[S::NT], vs[S::NT];  // TQ: scales of token nt * 8 + gid
  };
  auto load_tile = [&](int tile, TileRegs& r) {
    const int tb = tile * S::TILE;
#pragma unroll
    for (int nt = 0; nt < S::NT; ++nt) {
      const int t = min(tb + nt * 8 + gid, L - 1);
      load_words(kbase + int64_t(t) * S::TOKEN_BYTES, r.kw[nt]);
    }
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int t = min(tb + ks * 16 + 2 * tig + (q & 1) + (q >> 1) * 8, L - 1);
        load_words(vbase + int64_t(t) * S::TOKEN_BYTES, r.vw[ks][q]);
      }
    if constexpr (TQ) {
#pragma unroll
      for (int nt = 0; nt < S::NT; ++nt) {
        const int t = min(tb + nt * 8 + gid, L - 1);
        r.ks[nt] = __ldg(reinterpret_cast<const unsigned short*>(ksb + t));
        r.vs[nt] = __ldg(reinterpret_cast<const unsigned short*>(vsb + t));
      }
    }
  };
  TileRegs cur, nxt;
  if (tile_begin + warp < tile_end) load_tile(tile_begin + warp, cur);
  for (int tile = tile_begin + warp; tile < tile_end; tile += kWarps) {
    const int tb = tile * S::TILE;
    if (tile + kWarps < tile_end) load_tile(tile + kWarps, nxt);
    const auto& kw = cur.kw;
    const auto& vw = cur.vw;
    // Scores S[token, g] with the tokens as the MMA rows (session 12, as decode_tq128's v16):
    // 16-token tile t's rows gid and gid + 8 are tokens 16 t + gid (n-tile 2 t's loads) and
    // 16 t + 8 + gid (n-tile 2 t + 1's); lane (gid, tig) holds heads 2 tig, 2 tig + 1.
    constexpr int NM = S::TILE / 16;
    float s[NM][4];
    float2 vsc[NM];  // V scales of the tile's two tokens
#pragma unroll
    for (int t = 0; t < NM; ++t) {
      s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < S::KC; ++kc) {
        uint32_t a0, a1, a2, a3;
        if constexpr (TQ) {
          const uint32_t wa = kw[2 * t][kc / 2], wb = kw[2 * t + 1][kc / 2];
          const int sh = (kc & 1) * 16;
          a0 = my_lut[((wa >> sh) & 0xffu) << 5];
          a1 = my_lut[((wb >> sh) & 0xffu) << 5];
          a2 = my_lut[((wa >> (sh + 8)) & 0xffu) << 5];
          a3 = my_lut[((wb >> (sh + 8)) & 0xffu) << 5];
        } else {
          a0 = kw[2 * t][2 * kc], a1 = kw[2 * t + 1][2 * kc];
          a2 = kw[2 * t][2 * kc + 1], a3 = kw[2 * t + 1][2 * kc + 1];
        }
        mma16816<!TQ>(s[t], a0, a1, a2, a3, qa0[kc], qa2[kc]);
      }
      const int ta = tb + 16 * t + gid, tb8 = ta + 8;
      float ka = 1.0f, kb = 1.0f;
      vsc[t] = make_float2(1.0f, 1.0f);
      if constexpr (TQ) {
        ka = __half2float(__ushort_as_half(cur.ks[2 * t]));
        kb = __half2float(__ushort_as_half(cur.ks[2 * t + 1]));
        vsc[t] = make_float2(__half2float(__ushort_as_half(cur.vs[2 * t])),
                             __half2float(__ushort_as_half(cur.vs[2 * t + 1])));
      }
      s[t][0] = ta < L ? s[t][0] * ka : kNegInf;
      s[t][1] = ta < L ? s[t][1] * ka : kNegInf;
      s[t][2] = tb8 < L ? s[t][2] * kb : kNegInf;
      s[t][3] = tb8 < L ? s[t][3] * kb : kNegInf;
    }
    uint32_t pb[2 * NM];  // the PV B operands: P^T (tokens x heads), 8x8 tiles transposed
    const float2 c = sm.step(
        s, vsc, pb, [](float x) { return exp2f(x); },
        [](float pa, float pb_, float v) {  // (0 x a stale scale past the end: 0)
          const float wa = pa > 0.0f ? pa * v : 0.0f, wb = pb_ > 0.0f ? pb_ * v : 0.0f;
          return TQ ? pack_half2(wa, wb) : pack_bf162(wa, wb);
        });
    const float ca = c.x, cb = c.y;
#pragma unroll
    for (int m = 0; m < S::KC; ++m) {
      acc[m][0] *= ca, acc[m][1] *= cb, acc[m][2] *= ca, acc[m][3] *= cb;
    }

    // O^T[coord, g] += V^T[coord, tok] P^T[tok, g]; m-tile m rows gid / gid+8 are the two
    // coordinates of pair j = (D/16) * gid + m.
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks) {
#pragma unroll
      for (int m = 0; m < S::KC; ++m) {
        uint32_t x[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          if constexpr (TQ) {
            const uint32_t w = vw[ks][r][m / 4];
            x[r] = my_lut[((w >> ((m & 3) * 8)) & 0xffu) << 5];
          } else {
            x[r] = vw[ks][r][m];
          }
        }
        mma16816<!TQ>(acc[m], prmt(x[0], x[1], 0x5410), prmt(x[0], x[1], 0x7632),
                      prmt(x[2], x[3], 0x5410), prmt(x[2], x[3], 0x7632), pb[2 * ks],
                      pb[2 * ks + 1]);
      }
    }
    cur = nxt;
  }

  sm.store(wm, wl, warp * 8, gid, tig);
#pragma unroll
  for (int m = 0; m < S::KC; ++m) {
    const int j = (D / 16) * gid + m;
    float* w0 = wacc + (warp * 8 + 2 * tig) * D;
    float* w1 = w0 + D;
    w0[2 * j] = acc[m][0];
    w1[2 * j] = acc[m][1];
    w0[2 * j + 1] = acc[m][2];
    w1[2 * j + 1] = acc[m][3];
  }
  __syncthreads();
  for (int i = tid; i < gn * D; i += kThreads) {
    const int g = i / D, c = i % D;
    float M = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w * 8 + g]);
    float a = 0.0f, l = 0.0f;
    if (M != kNegInf) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float e = exp2f(wm[w * 8 + g] - M);
        a += e * wacc[(w * 8 + g) * D + c];
        l += e * wl[w * 8 + g];
      }
    }
    const int64_t slot = (int64_t(b) * p.n_head + q_head0 + g) * p.n_split + split;
    p.part_acc[slot * D + c] = a;
    if (c == 0) {
      p.part_ml[slot * 2] = M;
      p.part_ml[slot * 2 + 1] = l;
    }
  }
}

// out[b, h] = (sum_s acc_s 2^(m_s - M)) / (sum_s l_s 2^(m_s - M)), rotated back by R_v^T for TQ.
struct MergeParams {
  const float* part_acc;
  const float* part_ml;
  float* out;
  const DecodeSeqDesc* seqs;  // batched form: out row of each sequence
  int n_split, n_head;
  uint32_t vsign_in[8], vsign_out[8];
};

template <int D, bool TQ>
__global__ void __launch_bounds__(D) merge_kernel(const MergeParams p) {
  constexpr int kPre = 16;  // partials loaded before the weights are known
  __shared__ float y[D];
  __shared__ float wts[kMaxSplits];  // split s's weight 2^(m_s - M)
  __shared__ float lsum;
  const int64_t row = blockIdx.x;  // b * n_head + h
  const int c = threadIdx.x;
  pdl_release();  // the output projection's blocks may start their weight prefetch now
  pdl_wait();
  // Session 12: every thread loads its column of the first kPre splits' partials while warp 0
  // turns the splits' (m, l) into weights by shuffles (one L2 round trip for both, one barrier;
  // was: thread 0 alone walking the (m, l) pairs, then the loads).
  const float* pa = p.part_acc + row * p.n_split * D + c;
  float v[kPre];
#pragma unroll
  for (int u = 0; u < kPre; ++u) v[u] = u < p.n_split ? pa[int64_t(u) * D] : 0.0f;
  if (c < 32) {
    const float2* ml = reinterpret_cast<const float2*>(p.part_ml) + row * p.n_split;
    float M = kNegInf;
    for (int s = c; s < p.n_split; s += 32) M = fmaxf(M, ml[s].x);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float l = 0.0f;
    for (int s = c; s < p.n_split; s += 32) {
      const float2 e = ml[s];
      const float w = M == kNegInf ? 0.0f : exp2f(e.x - M);
      wts[s] = w;
      l += w * e.y;
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (c == 0) lsum = l;
  }
  __syncthreads();
  const float l = lsum;
  float a = 0.0f;
  if (l > 0.0f) {  // (an empty split's partial, weight 0, is never added)
#pragma unroll
    for (int u = 0; u < kPre; ++u)
      if (u < p.n_split && wts[u] != 0.0f) a += wts[u] * v[u];
    for (int s = kPre; s < p.n_split; ++s) {
      const float w = wts[s];
      if (w != 0.0f) a += w * pa[int64_t(s) * D];
    }
    a /= l;
  }
  if constexpr (TQ) {  // x = D1 H D2 y / sqrt(D)
    y[c] = tq_sign_set(p.vsign_out, c) ? -a : a;
    __syncthreads();
    for (int h = 1; h < D; h <<= 1) {
      if (c < D / 2) {
        const int j = (c / h) * 2 * h + (c % h);
        const float u = y[j], w = y[j + h];
        y[j] = u + w;
        y[j + h] = u - w;
      }
      __syncthreads();
    }
    const float s = rsqrtf(float(D));
    a = y[c] * (tq_sign_set(p.vsign_in, c) ? -s : s);
  }
  const int64_t orow =
      p.seqs ? int64_t(p.seqs[row / p.n_head].row) * p.n_head + row % p.n_head : row;
  p.out[orow * D + c] = a;
}

template <int D, bool TQ>
void launch(const DecodeAttnArgs& a, const AttnPlan& plan, cudaStream_t st) {
  using S = Shape<D, TQ>;
  DecodeParams p{};
  const int G = a.n_head / a.n_head_kv;
  p.q = a.q;
  p.part_acc = a.workspace;
  p.part_ml = a.workspace + size_t(a.batch) * a.n_head * plan.n_split * D;
  p.k = static_cast<const uint8_t*>(a.k);
  p.v = static_cast<const uint8_t*>(a.v);
  p.ks = a.k_scale;
  p.vs = a.v_scale;
  p.seq_stride = a.seq_stride;
  p.head_stride = a.head_stride;
  p.lens = a.lens;
  p.seqs = a.seqs;
  p.n_head = a.n_head;
  p.G = G;
  p.n_split = plan.n_split;
  p.n_sub = plan.n_sub;
  p.qscale = (a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(D))) * kLog2e;
  MergeParams mp{};
  mp.part_acc = p.part_acc;
  mp.part_ml = p.part_ml;
  mp.out = a.out;
  mp.n_split = plan.n_split;
  mp.n_head = a.n_head;
  mp.seqs = a.seqs;
  if constexpr (TQ) {
    shared_centroids(*a.k_codec, *a.v_codec, p.cent);
    for (int i = 0; i < 8; ++i) {
      p.ksign_in[i] = a.k_codec->sign_in[i];
      p.ksign_out[i] = a.k_codec->sign_out[i];
      mp.vsign_in[i] = a.v_codec->sign_in[i];
      mp.vsign_out[i] = a.v_codec->sign_out[i];
    }
  }
  const size_t smem = S::smem_bytes();
  static bool configured = false;  // per template instance
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<D, TQ>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  if (plan.n_split < 1 || plan.n_split > kMaxSplits) raise("decode_attention: split count out of range");
  dim3 grid(plan.n_split, a.n_head_kv * plan.n_sub, a.batch);
  // Both with PDL: the merge's blocks wait in place, and the output projection after it may
  // start prefetching its weights while the decode runs. (A merge fused into the decode
  // kernel's last block measured 2.5 us per layer slower at batch 1: its fence / atomic / L2
  // reads sit on the critical path behind that prefetch.)
  launch_pdl(decode_kernel<D, TQ>, grid, dim3(kThreads), smem, st, p);
  check_last_launch("decode_kernel");
  launch_pdl(merge_kernel<D, TQ>, dim3(a.batch * a.n_head), dim3(D), 0, st, mp);
  check_last_launch("merge_kernel");
}

}  // namespace

size_t decode_attention_workspace(const AttnPlan& plan, int batch, int n_head, int head_dim) {
  return size_t(batch) * n_head * (plan.n_split + 1) * (head_dim + 2) * sizeof(float);
}

// decode_tq128.cu: the fast TurboQuant path for head_dim 128 (cp.async staging, fused merge).
bool tq128_supported(const DecodeAttnArgs& a);
void decode_attention_tq128(const DecodeAttnArgs& a, const AttnPlan& plan, void* stream);

void decode_attention(const DecodeAttnArgs& a, const AttnPlan& plan, void* stream) {
  if (plan.kernel != AttnKernel::DecodeSplitK) raise(std::string("decode_attention: plan is ") + attn_kernel_name(plan.kernel));
  if (a.n_head % a.n_head_kv != 0) raise("decode_attention: bad head counts");
  const bool tq = a.format == KvFormat::TurboQuant;
  if (tq && (!a.k_codec || !a.v_codec || (!a.seqs && (!a.k_scale || !a.v_scale))))
    raise("decode_attention: TurboQuant needs codecs and scales");
  if (tq && tq128_supported(a)) {
    decode_attention_tq128(a, plan, stream);
    return;
  }
  if (a.k_tail || a.seqs_tail) raise("decode_attention: an exact tail needs TurboQuant, head_dim 128, aligned");
  if (a.record) raise("decode_attention: a record job needs the TurboQuant head_dim-128 kernel");
  cudaStream_t st = as_stream(stream);
  switch (a.head_dim * 2 + (tq ? 1 : 0)) {
    case 128: launch<64, false>(a, plan, st); return;
    case 129: launch<64, true>(a, plan, st); return;
    case 256: launch<128, false>(a, plan, st); return;
    case 257: launch<128, true>(a, plan, st); return;
    case 512: launch<256, false>(a, plan, st); return;
    case 513: launch<256, true>(a, plan, st); return;
  }
  raise("decode_attention: head_dim " + std::to_string(a.head_dim) + " is not supported");
}

}  // namespace tq::cuda
