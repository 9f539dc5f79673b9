// Flash-attention style prefill kernels (prefill_attention.h): 4 warps x 16 query rows per
// block, 64-key (32 at d=256) K/V tiles in swizzled shared memory, mma.sync m16n8k16 bf16,
// online softmax in registers; dense bf16 K/V by cp.async double buffering, TurboQuant 4-bit
// codes decoded per tile into shared memory. Also the LSE merge of two partial attentions.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_wgmma.h"

namespace tq::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillParams {
  const float* q;
  float* out;
  float* lse;
  const uint8_t* k;  // bf16 rows or packed codes
  const uint8_t* v;
  const uint16_t* k_scale;
  const uint16_t* v_scale;
  int64_t head_stride;
  int T, L, off, window;  // off = q_pos0 - k_pos0 (positions fit in int: checked by the host)
  int n_head, group;
  bool causal;
  float q_mul;  // scale * log2(e): scores come out in log2 units
  float kcent[16], vcent[16];
};

// Element offset of 16-byte chunk c of row r in a [rows][D] 16-bit tile (XOR swizzle: the 8
// rows an ldmatrix phase reads hit 8 distinct bank groups).
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

// K/V formats of the kernel: dense bf16; TurboQuant decoded to bf16 through a 16-entry float
// table (any codecs); TurboQuant decoded to fp16 through a 256-entry half2 table of byte pairs,
// one copy per lane (shared K/V centroids), with fp16 mma.
enum Mode : int { kDense = 0, kTqF32 = 1, kTqLut = 2 };

// D: head dim; BN: keys per tile; MT: 16-row m-tiles per warp (block rows 64 * MT).
template <int D, int BN, int MT, int kMode>
struct Cfg {
  static constexpr bool kTq = kMode != kDense, kF16 = kMode == kTqLut;
  static constexpr int kBM = kWarps * 16 * MT;
  static constexpr bool kQRegs = D <= 128 && MT == 1;  // Q fragments live in registers
  static constexpr int kTile = BN * D;                 // elements of one K or V tile
  static constexpr int kTileBytes = kTile * 2;
  static constexpr int kCodeBytes = BN * D / 2;  // packed codes of one K or V tile
  static constexpr int kRawStage = 2 * kCodeBytes + 4 * BN;  // K, V codes; K, V fp16 scales
  // Dense: two stages of (K, V). TurboQuant: one decoded (K, V), two raw stages, the table.
  // Q: staged in stage 1 (dense) or in K (TurboQuant) when kQRegs, else its own area.
  static constexpr int kQBytes = kQRegs ? 0 : kBM * D * 2;
  static constexpr int kQStage = kQRegs ? kBM * D * 2 : 0;
  static_assert(kQStage <= kTileBytes, "Q staging must fit in one tile");
  static constexpr int kRawOff = 2 * kTileBytes;
  static constexpr int kQOff = kTq ? (kQRegs ? 0 : kRawOff + 2 * kRawStage)
                                   : (kQRegs ? 2 * kTileBytes : 4 * kTileBytes);
  static constexpr int kLutOff = kTq ? kRawOff + 2 * kRawStage + kQBytes : 0;
  static constexpr int kBytes = kTq ? kLutOff + (kF16 ? 256 * 32 * 4 : 0) : 4 * kTileBytes + kQBytes;
};

template <int D, int BN, int MT, int kMode, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) prefill_attn_kernel(const PrefillParams p) {
  using C = Cfg<D, BN, MT, kMode>;
  constexpr int kBM = C::kBM, kR = 16 * MT;  // rows per block, per warp
  constexpr bool kF16 = C::kF16;
  extern __shared__ __align__(128) uint8_t smem[];
  uint16_t* tiles = reinterpret_cast<uint16_t*>(smem);
  __shared__ float cent[2][16];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.x, hk = h / p.group;
  const int m0 = int(gridDim.y - 1 - blockIdx.y) * kBM;  // heaviest causal rows first
  const int w0 = m0 + warp * kR;                         // this warp's first query
  const int64_t kv_base = int64_t(hk) * p.head_stride;

  // Key range [j_lo, j_hi) any row of the block may see.
  int j_lo = 0, j_hi = p.L;
  if (p.causal) {
    j_hi = min(p.L, p.off + m0 + kBM);
    if (p.window > 0) j_lo = max(0, p.off + m0 - p.window + 1);
  }
  const int n_begin = j_lo / BN;
  const int n_tiles = j_hi > j_lo ? (j_hi + BN - 1) / BN - n_begin : 0;

  auto pack = [](float lo, float hi) { return kF16 ? pack_half2(lo, hi) : pack_bf162(lo, hi); };
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + C::kLutOff);
  if constexpr (kMode == kTqF32) {
    if (tid < 16) cent[0][tid] = p.kcent[tid], cent[1][tid] = p.vcent[tid];
  } else if constexpr (kMode == kTqLut) {
    for (int i = tid; i < 256 * 32; i += kThreads) {
      const int e = i >> 5;
      lut[i] = pack_half2(p.kcent[e & 15], p.kcent[e >> 4]);
    }
  }

  // ---- Q: f32 -> scaled bf16/fp16 in shared memory (zero rows past T).
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem + C::kQOff);
  for (int i = tid; i < kBM * D / 8; i += kThreads) {
    const int r = i / (D / 8), c = i % (D / 8);
    uint4 w = make_uint4(0, 0, 0, 0);
    if (m0 + r < p.T) {
      const float4* src =
          reinterpret_cast<const float4*>(p.q + (int64_t(m0 + r) * p.n_head + h) * D + c * 8);
      const float4 a = __ldg(src), b = __ldg(src + 1);
      const float s = p.q_mul;
      w = make_uint4(pack(a.x * s, a.y * s), pack(a.z * s, a.w * s), pack(b.x * s, b.y * s),
                     pack(b.z * s, b.w * s));
    }
    *reinterpret_cast<uint4*>(qs + swz<D>(r, c)) = w;
  }

  // ---- K/V loads of key tile `tile` (absolute index) into stage st.
  auto issue_dense = [&](int tile, int st) {
    uint16_t* ks = tiles + st * 2 * C::kTile;
    uint16_t* vs = ks + C::kTile;
    for (int i = tid; i < BN * D / 8; i += kThreads) {
      const int r = i / (D / 8), c = i % (D / 8);
      const int j = tile * BN + r;
      const bool ok = j < p.L;
      const int64_t off = (kv_base + (ok ? j : 0)) * (D * 2) + c * 16;
      cp_async16_zfill(ks + swz<D>(r, c), p.k + off, ok ? 16 : 0);
      cp_async16_zfill(vs + swz<D>(r, c), p.v + off, ok ? 16 : 0);
    }
  };
  // TurboQuant raw stage st: K codes, V codes, K scales, V scales.
  uint8_t* raw = smem + C::kRawOff;
  auto issue_codes = [&](int tile, int st) {
    uint8_t* ks = raw + st * C::kRawStage;
    for (int i = tid; i < C::kCodeBytes / 16; i += kThreads) {
      const int r = i / (D / 32), c = i % (D / 32);
      const int j = tile * BN + r;
      if (j < p.L) {
        const int64_t off = (kv_base + j) * (D / 2) + c * 16;
        cp_async16(ks + r * (D / 2) + c * 16, p.k + off);
        cp_async16(ks + C::kCodeBytes + r * (D / 2) + c * 16, p.v + off);
      }
    }
  };
  uint16_t sk = 0, sv = 0;  // this thread's token scales of the next tile (tid < BN)
  auto load_scales = [&](int tile) {
    const int j = tile * BN + tid;
    if (tid < BN && j < p.L) sk = p.k_scale[kv_base + j], sv = p.v_scale[kv_base + j];
  };
  auto store_scales = [&](int st) {
    uint16_t* s = reinterpret_cast<uint16_t*>(raw + st * C::kRawStage + 2 * C::kCodeBytes);
    if (tid < BN) s[tid] = sk, s[BN + tid] = sv;
  };
  // Decodes raw stage st (tile `tile`) into the K and V tiles: centroid[code] * scale.
  auto decode = [&](int tile, int st) {
    const uint8_t* rs = raw + st * C::kRawStage;
    const uint16_t* sc = reinterpret_cast<const uint16_t*>(rs + 2 * C::kCodeBytes);
#pragma unroll 4
    for (int i = tid; i < 2 * BN * D / 8; i += kThreads) {
      const int which = i / (BN * D / 8), r = (i / (D / 8)) % BN, c = i % (D / 8);
      uint4 w = make_uint4(0, 0, 0, 0);
      if (tile * BN + r < p.L) {
        const uint32_t code =
            *reinterpret_cast<const uint32_t*>(rs + which * C::kCodeBytes + r * (D / 2) + c * 4);
        uint32_t o[4];
        if constexpr (kMode == kTqLut) {
          const __half2 s2 = __half2half2(__ushort_as_half(sc[which * BN + r]));
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            uint32_t e = lut[((code >> (8 * b)) & 255) * 32 + lane];
            __half2 x = __hmul2(*reinterpret_cast<__half2*>(&e), s2);
            o[b] = *reinterpret_cast<uint32_t*>(&x);
          }
        } else {
          const float s = __half2float(__ushort_as_half(sc[which * BN + r]));
          const float* cb = cent[which];
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            const uint32_t byte = code >> (8 * b);
            o[b] = pack_bf162(cb[byte & 15] * s, cb[(byte >> 4) & 15] * s);
          }
        }
        w = make_uint4(o[0], o[1], o[2], o[3]);
      }
      *reinterpret_cast<uint4*>(tiles + which * C::kTile + swz<D>(r, c)) = w;
    }
  };

  if (n_tiles > 0) {
    if constexpr (C::kTq) {
      issue_codes(n_begin, 0);
      load_scales(n_begin);
      store_scales(0);
    } else {
      issue_dense(n_begin, 0);
    }
  }
  cp_commit();
  __syncthreads();  // Q, tables, tile-0 scales visible

  uint32_t qf[C::kQRegs ? D / 16 : 1][4];
  const uint32_t qs_addr = smem_u32(qs);
  // A fragment of m-tile mt, columns 16kk..16kk+15.
  auto q_frag = [&](int mt, int kk, uint32_t (&a)[4]) {
    ldmatrix_x4(a, qs_addr + 2 * swz<D>(warp * kR + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
  };
  if constexpr (C::kQRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) q_frag(0, kk, qf[kk]);
    __syncthreads();  // Q's staging area is about to be overwritten
  }

  float o[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  float m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;
  const int g = lane >> 2, c4 = lane & 3;

  for (int it = 0; it < n_tiles; ++it) {
    const int tile = n_begin + it, n0 = tile * BN;
    const bool more = it + 1 < n_tiles;
    if constexpr (C::kTq) {
      if (more) issue_codes(tile + 1, (it + 1) & 1), load_scales(tile + 1);
    } else {
      if (more) issue_dense(tile + 1, (it + 1) & 1);
    }
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if constexpr (C::kTq) {
      decode(tile, it & 1);
      __syncthreads();
    }
    const uint16_t* ks = C::kTq ? tiles : tiles + (it & 1) * 2 * C::kTile;
    const uint32_t k_addr = smem_u32(ks), v_addr = smem_u32(ks + C::kTile);

    // Does this warp see any key of the tile? Does any of its elements need a mask?
    bool skip = false, need_mask = n0 + BN > p.L;
    if (p.causal) {
      skip = n0 > p.off + w0 + kR - 1 || (p.window > 0 && n0 + BN - 1 <= p.off + w0 - p.window);
      need_mask = need_mask || n0 + BN - 1 > p.off + w0 ||
                  (p.window > 0 && n0 <= p.off + w0 + kR - 1 - p.window);
    }
    if (!skip) {
      float s[MT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (C::kQRegs) {
#pragma unroll
            for (int x = 0; x < 4; ++x) a[mt][x] = qf[kk][x];
          } else {
            q_frag(mt, kk, a[mt]);
          }
        }
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          uint32_t b[4];
          const int grp = lane >> 3;
          ldmatrix_x4(b, k_addr + 2 * swz<D>(np * 16 + (grp >> 1) * 8 + (lane & 7),
                                             kk * 2 + (grp & 1)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<!kF16>(s[mt][2 * np], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
            mma16816<!kF16>(s[mt][2 * np + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (need_mask) {
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int t = w0 + mt * 16 + g + (e >> 1) * 8, j = n0 + nt * 8 + 2 * c4 + (e & 1);
              bool vis = j < p.L;
              if (p.causal)
                vis = vis && j <= p.off + t && (p.window <= 0 || p.off + t - j < p.window);
              if (!vis) s[mt][nt][e] = -INFINITY;
            }
        }
        // Online softmax for rows g (r = 0) and g + 8 (r = 1); four lanes share a row.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt)
            mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_run[mt][r], mx);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          const float alpha = fast_exp2(m_run[mt][r] - m_use);
          m_run[mt][r] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) {
            s[mt][nt][2 * r] = fast_exp2(s[mt][nt][2 * r] - m_use);
            s[mt][nt][2 * r + 1] = fast_exp2(s[mt][nt][2 * r + 1] - m_use);
            sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
          }
          l_run[mt][r] = l_run[mt][r] * alpha + sum;
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
        }
      }
      // O += P V: P's accumulators, packed to 16 bits, are the A fragments of the second product.
      uint32_t pa[MT][BN / 16][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          pa[mt][kk][0] = pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][kk][1] = pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][kk][2] = pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][kk][3] = pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          const int grp = lane >> 3;
          ldmatrix_x4_trans(b, v_addr + 2 * swz<D>(kk * 16 + (grp & 1) * 8 + (lane & 7),
                                                   dp * 2 + (grp >> 1)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint32_t(&a)[4] = pa[mt][kk];
            mma16816<!kF16>(o[mt][2 * dp], a[0], a[1], a[2], a[3], b[0], b[1]);
            mma16816<!kF16>(o[mt][2 * dp + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
          }
        }
      }
    }
    if constexpr (C::kTq) {
      if (more) store_scales((it + 1) & 1);
    }
    __syncthreads();  // the stage read here is refilled next iteration
  }
  cp_wait<0>();

  // ---- Normalize and store rows g, g + 8 of each m-tile.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int t = w0 + mt * 16 + g + 8 * r;
      if (t >= p.T) continue;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      float* dst = p.out + (int64_t(t) * p.n_head + h) * D + 2 * c4;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<float2*>(dst + dt * 8) =
            make_float2(o[mt][dt][2 * r] * inv, o[mt][dt][2 * r + 1] * inv);
      if (p.lse && c4 == 0)
        p.lse[int64_t(t) * p.n_head + h] =
            l > 0.0f ? (m_run[mt][r] + log2f(l)) * 0.6931471805599453f : -INFINITY;
    }
}

__global__ void merge_kernel(float* __restrict__ out_a, float* __restrict__ lse_a,
                             const float* __restrict__ out_b, const float* __restrict__ lse_b,
                             int64_t rows, int d4) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const MergeWeights w = merge_weights(lse_a[row], lse_b[row]);
  float4* a = reinterpret_cast<float4*>(out_a + row * d4 * 4);
  const float4* b = reinterpret_cast<const float4*>(out_b + row * d4 * 4);
  for (int i = threadIdx.x % 32; i < d4; i += 32) {
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f), y = x;
    if (w.wa > 0.0f) x = a[i];  // an empty side's output is never read (NaN bytes, maybe)
    if (w.wb > 0.0f) y = b[i];
    a[i] = make_float4(merge_value(w, x.x, y.x), merge_value(w, x.y, y.y), merge_value(w, x.z, y.z),
                       merge_value(w, x.w, y.w));
  }
  __syncwarp();
  if (threadIdx.x % 32 == 0) lse_a[row] = w.lse();
}

template <int D, int BN, int MT, int kMode, int kMinBlocks>
void launch(const PrefillParams& p, int64_t T, int n_head, cudaStream_t st) {
  auto* k = prefill_attn_kernel<D, BN, MT, kMode, kMinBlocks>;
  constexpr int bytes = Cfg<D, BN, MT, kMode>::kBytes, bm = Cfg<D, BN, MT, kMode>::kBM;
  static bool attr = false;  // per instantiation; the kernels run on one device
  if (!attr) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
    attr = true;
  }
  const int64_t mb = (T + bm - 1) / bm;
  if (mb > 65535) raise("prefill_attention: T=" + std::to_string(T) + " exceeds the grid");
  k<<<dim3(unsigned(n_head), unsigned(mb)), kThreads, bytes, st>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void prefill_attention(const PrefillAttnArgs& a, void* stream) {
  const int d = a.head_dim;
  const bool tq = a.format == KvFormat::TurboQuant;
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0)
    raise("prefill_attention: n_head " + std::to_string(a.n_head) + " is not a multiple of n_head_kv " +
          std::to_string(a.n_head_kv));
  if (a.format != KvFormat::BF16 && !tq) raise("prefill_attention: K/V must be bf16 or TurboQuant");
  if (!tq && d != 64 && d != 128 && d != 256)
    raise("prefill_attention: bf16 head_dim " + std::to_string(d) + " (supported: 64, 128, 256)");
  if (tq && (d != 128 || !a.k_codec || !a.v_codec || a.k_codec->bits != 4 || a.v_codec->bits != 4 ||
             a.k_codec->head_dim != 128 || a.v_codec->head_dim != 128 || !a.k_scale || !a.v_scale))
    raise("prefill_attention: TurboQuant needs head_dim 128, 4-bit codecs and scales (head_dim " +
          std::to_string(d) + ")");
  if (a.T < 0 || a.L < 0 || (a.L > 0 && a.head_stride < a.L))
    raise("prefill_attention: bad lengths T=" + std::to_string(a.T) + " L=" + std::to_string(a.L) +
          " head_stride=" + std::to_string(a.head_stride));
  if (a.tail_len < 0 || (a.tail_len > 0 && (!a.rotate_back || !a.tail_k || !a.tail_v || a.tail_stride < a.tail_len)))
    raise("prefill_attention: bad exact tail (tail_len " + std::to_string(a.tail_len) +
          "; it needs rotate_back and its rows)");
  if (a.rotate_back) {
    if (!prefill_wgmma_one_launch(a, stream))
      raise("prefill_attention: rotate_back and exact tail rows need the Hopper TurboQuant kernel "
            "(sm_90, head_dim 128, one symmetric codebook, no window, TQ_PREFILL_WGMMA_TQ and "
            "TQ_PREFILL_ONE_LAUNCH not 0)");
    if (a.T > 0) prefill_attention_wgmma(a, stream);
    return;
  }
  if (a.T == 0) return;
  PrefillParams p{};
  p.q = a.q, p.out = a.out, p.lse = a.lse;
  p.k = static_cast<const uint8_t*>(a.k), p.v = static_cast<const uint8_t*>(a.v);
  p.k_scale = a.k_scale, p.v_scale = a.v_scale;
  const int64_t big = int64_t(1) << 29;  // positions and lengths stay far from int overflow
  if (a.T >= big || a.L >= big || std::abs(a.q_pos0) >= big || std::abs(a.k_pos0) >= big ||
      a.window < 0 || a.head_stride >= (int64_t(1) << 40))
    raise("prefill_attention: positions or lengths out of range");
  p.head_stride = a.head_stride, p.T = int(a.T), p.L = int(a.L);
  p.off = int(a.q_pos0 - a.k_pos0), p.window = int(std::min(a.window, big));
  p.n_head = a.n_head, p.group = a.n_head / a.n_head_kv, p.causal = a.causal;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(d));
  p.q_mul = scale * kLog2e;
  if (tq)
    for (int i = 0; i < 16; ++i) p.kcent[i] = a.k_codec->centroids[i], p.vcent[i] = a.v_codec->centroids[i];
  cudaStream_t st = as_stream(stream);
  // TQ_PREFILL_VARIANT (benchmark aid) at d=128: 1 = version 1 (16 rows per warp, Q fragments
  // in registers, 3 blocks/SM; TurboQuant through the float table in bf16); 3 = 32-key tiles.
  static const int variant = [] {
    const char* e = std::getenv("TQ_PREFILL_VARIANT");
    return e ? std::atoi(e) : 2;
  }();
  if (tq) {
    bool same = true;  // the byte-pair table needs one codebook for K and V
    for (int i = 0; i < 16; ++i) same = same && p.kcent[i] == p.vcent[i];
    // The Hopper wgmma kernel (prefill_wgmma.cu) decodes the codes in its producer warpgroup.
    if (same && a.window == 0 && variant == 2 && prefill_wgmma_tq_enabled() &&
        prefill_wgmma_handles(a) && prefill_wgmma_available(stream))
      return prefill_attention_wgmma(a, stream);
    if (variant == 1 || !same) return launch<128, 64, 1, kTqF32, 3>(p, a.T, a.n_head, st);
    if (variant == 3) return launch<128, 32, 2, kTqLut, 2>(p, a.T, a.n_head, st);
    return launch<128, 64, 2, kTqLut, 2>(p, a.T, a.n_head, st);
  }
  // The Hopper wgmma kernel (prefill_wgmma.cu) for bf16 d=128 without a window, when enabled.
  if (d == 128 && variant == 2 && prefill_wgmma_handles(a) && prefill_wgmma_enabled() &&
      prefill_wgmma_available(stream))
    return prefill_attention_wgmma(a, stream);
  if (d == 64) return launch<64, 64, 1, kDense, 3>(p, a.T, a.n_head, st);
  if (d == 128 && variant == 1) return launch<128, 64, 1, kDense, 3>(p, a.T, a.n_head, st);
  if (d == 128 && variant == 3) return launch<128, 32, 2, kDense, 2>(p, a.T, a.n_head, st);
  if (d == 128) return launch<128, 64, 2, kDense, 2>(p, a.T, a.n_head, st);
  launch<256, 32, 1, kDense, 1>(p, a.T, a.n_head, st);
}

void merge_attention(float* out_a, float* lse_a, const float* out_b, const float* lse_b,
                     int64_t rows, int head_dim, void* stream) {
  if (head_dim % 4 != 0) raise("merge_attention: head_dim must be a multiple of 4");
  if (rows <= 0) return;
  const int per_block = 8;  // rows (one warp each)
  merge_kernel<<<unsigned((rows + per_block - 1) / per_block), 32 * per_block, 0,
                 as_stream(stream)>>>(out_a, lse_a, out_b, lse_b, rows, head_dim / 4);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tq::cuda
