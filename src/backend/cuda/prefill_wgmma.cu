// Hopper (sm_90a) prefill attention for dense bf16 or TurboQuant 4-bit K/V at head_dim 128
// (prefill_wgmma.h): warp-specialized blocks of 128 query rows: one producer warpgroup fills
// 128-key K/V tiles in 128B-swizzled shared memory (bf16: TMA, 3 stages; TurboQuant: code
// tiles by bulk copies and fp16 scales through registers into staging, decoded to fp16 tiles, 2
// stages, the ALU decode by two producer warpgroups of 64 keys a tile each, the one-launch
// variant's exact-row tiles by TMA; mbarriers),
// two consumer warpgroups (64 rows each) compute S = Q K^T with wgmma from shared memory, the
// online softmax in registers (exp2), and O += P V with P as the register A operand
// (prefill_wgmma_consumer.cuh). The one-launch variant runs through prefill_wgmma_ring.cu's kernel
// (each record tile decoded once per kv head) when the caller gives it a workspace.
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kv_tensor_map.h"
#include "backend/cuda/prefill_wgmma.h"
#include "backend/cuda/prefill_wgmma_consumer.cuh"
#include "backend/cuda/prefill_wgmma_ops.cuh"
#include "backend/cuda/prefill_wgmma_params.cuh"
#include "backend/cuda/prefill_wgmma_probe.cuh"
#include "backend/cuda/prefill_wgmma_tq.cuh"

namespace tq::cuda {
namespace {

// On by default: correct and 1.6-1.7x the mma.sync kernel on the H200 (TQ_PREFILL_WGMMA=0 turns
// it off; bench/results/cuda-prefill-2026-11-30.md). TurboQuant: TQ_PREFILL_WGMMA_TQ.
constexpr bool kDefaultOn = true;
constexpr bool kTqDefaultOn = true;
// TurboQuant decode: ALU (centroids in registers) by default; TQ_PREFILL_TQ_DECODE=table / alu.
constexpr bool kTqAluDefault = true;

#ifndef TQ_WG_SPLIT_KV
#define TQ_WG_SPLIT_KV 0  // ALU decode: 1 = publish a stage's K before decoding its V
#endif
#ifndef TQ_WG_ALU_PRODUCERS
#define TQ_WG_ALU_PRODUCERS 2  // producer warpgroups of the ALU decode (1 or 2)
#endif
#ifndef TQ_WG_PROD_REGS
// Registers of an ALU-decode producer thread (the consumers get the rest).
#define TQ_WG_PROD_REGS (TQ_WG_ALU_PRODUCERS == 2 ? 48 : 56)
#endif

// Shared memory: Q | kStages x (K, V) tiles | TurboQuant: 2 raw stages (K codes, V codes, K
// scales, V scales), the byte-pair table (256 half2 x 32 lane copies) or the ALU decode's 8
// centroid magnitudes (half2 pairs) | mbarriers.
// Kernel variants: dense bf16; TurboQuant decoded through H8's shared-memory byte-pair table;
// TurboQuant decoded by ALU only (the 8 centroid magnitudes in registers, as byte planes
// selected with prmt; the codebook is symmetric); the ALU variant that also takes a TurboQuant
// prefill chunk's exact rows (fp16 tiles after the records, one softmax over both) and writes
// the output rotated back by R_v^T (the engine's whole chunk attention in one launch:
// PrefillAttnArgs::rotate_back).
enum WgMode { kDense = 0, kTqTable = 1, kTqAlu = 2, kTqAluTail = 3 };
template <int kMode>
struct WgCfg {
  static constexpr bool kTq = kMode != kDense;
  static constexpr bool kAlu = kMode == kTqAlu || kMode == kTqAluTail;  // the ALU decode
  static constexpr bool kTail = kMode == kTqAluTail;
  using Params = std::conditional_t<kTail, WgTailParams, WgParams>;
  static constexpr int kStages = kTq ? 2 : 3;
  static constexpr int kCodeBytes = kBN * kD / 2;
  // Scales: fp16 (table) or fp16 pairs (ALU: the half2 multiplier, one 32-bit load).
  static constexpr int kRawStage = 2 * kCodeBytes + (kAlu ? 8 : 4) * kBN;
  static constexpr int kRawOff = kQBytes + kStages * 2 * kTileBytes;
  static constexpr int kLutOff = kRawOff + (kTq ? 2 * kRawStage : 0);  // table or ALU magnitudes
  static constexpr int kBarOff = kLutOff + (kMode == kTqTable ? 256 * 32 * 4 : kAlu ? 32 : 0);
  // Producer warpgroups (the ALU decode: 2 by default, each decoding half of every tile's keys),
  // then 2 consumer warpgroups.
  static constexpr int kProdWgs = kAlu ? TQ_WG_ALU_PRODUCERS : 1;
  static constexpr int kThreads = 128 * (kProdWgs + 2);
  // setmaxnreg split of the registers a thread is built with (kBase: 65536 / kThreads, a
  // multiple of 8): producers + 2 consumers = (kProdWgs + 2) x kBase.
  static constexpr int kBase = 65536 / kThreads / 8 * 8;
  static constexpr int kProdRegs = kMode == kDense ? 40 : kMode == kTqTable ? 56 : TQ_WG_PROD_REGS;
  static constexpr int kConsRegs = ((kProdWgs + 2) * kBase - kProdWgs * kProdRegs) / 2;
  // ALU decode: K and V of a stage published by separate barriers (TQ_WG_SPLIT_KV=1).
  static constexpr bool kSplitKV = kMode == kTqAlu && TQ_WG_SPLIT_KV && TQ_WG_ALU_PRODUCERS == 1;
  static_assert(kProdWgs == 1 || kProdWgs == 2);
  // Barriers: full, empty, full_v (kStages each), TurboQuant: raw stage copies [kProdWgs][2].
  static constexpr int kBarBytes = 8 * (3 * kStages + (kTq ? 2 * kProdWgs : 0));
  static_assert(kRawStage % 16 == 0, "bulk copies move 16-byte multiples");
  static constexpr int kSmemBytes = kBarOff + kBarBytes + 1024;  // + align slack
  // (Also references the switch in the passes that compile no kernel body: nvcc warning #177.)
  static_assert(!kSplitKV || kProdWgs == 1, "K published first needs the one-producer decode");
  static_assert(kProdRegs % 8 == 0 && kConsRegs % 8 == 0 && kConsRegs <= 256 &&
                kProdWgs * kProdRegs + 2 * kConsRegs == (kProdWgs + 2) * kBase);
  static_assert(kSmemBytes <= 232448, "over the sm_90 shared memory limit");
};

template <int kMode>
__global__ void __launch_bounds__(WgCfg<kMode>::kThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ typename WgCfg<kMode>::Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WgCfg<kMode>;
  constexpr bool kTq = C::kTq;
  constexpr int kStages = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  // ALU decode: the aligned base as an offset from smem_raw, so the compiler sees shared memory
  // (ld / st.shared with immediate offsets rather than generic 64-bit accesses).
  uint8_t* smem = C::kAlu
                      ? smem_raw + ((0u - smem_u32(smem_raw)) & 1023u)
                      : reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                                   ~uintptr_t(1023));
  uint8_t* qs = smem;
  uint8_t* kv = smem + kQBytes;  // stage s: K at kv + 2 s kTileBytes, V right after
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
  uint64_t* empty = full + kStages;
  uint64_t* full_v = empty + kStages;  // C::kSplitKV: V of stage s decoded (full: K only)
  uint64_t* raw_full = full_v + kStages;  // TurboQuant: [producer warpgroup][raw stage] codes landed

  const int tid = threadIdx.x, wg = tid >> 7;
  const int h = blockIdx.x, hk = h / p.group;
  const int m0 = int(gridDim.y - 1 - blockIdx.y) * kBM;  // heaviest causal rows first
  const int j_hi = p.causal ? min(p.L, p.off + m0 + kBM) : p.L;
  // Record tiles (the K/V arrays), then kTqAluTail's exact-row tiles.
  const int n_rec = j_hi > 0 ? (j_hi + kBN - 1) / kBN : 0;
  int n_tiles = n_rec;
  if constexpr (C::kTail) {
    const int w_hi = exact_rows_seen(p, m0);
    if (w_hi > 0) n_tiles += (w_hi + kBN - 1) / kBN;
  }

  if (tid == 0) {
    const int producers = !kTq && p.tma ? 1 : 128 * C::kProdWgs;  // TMA: thread 0's expect_tx
    for (int s = 0; s < kStages; ++s) mbar_init(full + s, producers), mbar_init(empty + s, 8);
    if constexpr (C::kSplitKV)
      for (int s = 0; s < kStages; ++s) mbar_init(full_v + s, 128 * C::kProdWgs);
    if constexpr (kTq)
      for (int i = 0; i < 2 * C::kProdWgs; ++i) mbar_init(raw_full + i, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // for the async proxy
  }
  if constexpr (C::kAlu) {
    // (Two copies: the producer's lanes read copy lane & 1, so the compiler cannot keep the
    // planes in uniform registers, which prmt cannot take as data: v1 copied them back each use.)
    if (tid < 8) reinterpret_cast<uint32_t*>(smem + C::kLutOff)[tid] = wgtq::magnitude_pair(p.cent, tid & 3);
  }
  if constexpr (kMode == kTqTable) {
    // Byte-pair table: entry e (codes e & 15, e >> 4) as half2, one copy per lane (bank = lane).
    uint32_t* lut = reinterpret_cast<uint32_t*>(smem + C::kLutOff);
    for (int i = tid; i < 256 * 32; i += C::kThreads) {
      const int e = i >> 5;
      lut[i] = pack_half2(p.cent[e & 15], p.cent[e >> 4]);
    }
  }
  __syncthreads();

  if (wg < C::kProdWgs) {
    if constexpr (kTq) {
      // ---- TurboQuant producer: raw stage it & 1 holds tile it's codes (two bulk copies by the
      // warpgroup's thread 0, on raw_full; rows past L keep stale bytes) and scales (loaded one
      // tile ahead through registers; 0 past L, so those keys decode to zeros); the decode of
      // tile it into stage it % kStages overlaps the copies of tile it + 1.
      // Two producer warpgroups (kHalf): warpgroup `half` copies, decodes and publishes keys
      // 64 half .. 64 half + 63 of each tile, synchronized on its own named barrier.
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProdRegs));
      constexpr bool kHalf = C::kProdWgs == 2;
      const int half = wg, pt = tid & 127, pbar = 3 + half;
      const int64_t kv_base = int64_t(hk) * p.head_stride;
      const int lane = tid & 31;
      // ALU decode: the 8 fp16 magnitudes as half2 pairs, in ordinary registers.
      uint32_t mh[4];
      if constexpr (C::kAlu) {
        const uint4 a = reinterpret_cast<const uint4*>(smem + C::kLutOff)[lane & 1];
        mh[0] = a.x, mh[1] = a.y, mh[2] = a.z, mh[3] = a.w;
      }
      uint8_t* raw = smem + C::kRawOff;
      const uint32_t* lut = reinterpret_cast<const uint32_t*>(smem + C::kLutOff);
      uint16_t sk = 0, sv = 0;
      uint64_t* my_raw_full = raw_full + 2 * half;
      auto issue = [&](int it) {  // thread 0: the tile's K rows and V rows, two bulk copies
        if (pt != 0) return;
        constexpr int kRowsIn = kHalf ? kBN / 2 : kBN;
        const int j0 = it * kBN + half * kRowsIn, rows = max(0, min(kRowsIn, p.L - j0));
        uint8_t* rs = raw + (it & 1) * C::kRawStage + half * kRowsIn * (kD / 2);
        uint64_t* bar = my_raw_full + (it & 1);
        mbar_expect_tx(bar, uint32_t(2 * rows * (kD / 2)));
        if (rows > 0) {
          const int64_t off = (kv_base + j0) * (kD / 2);
          bulk_copy(rs, p.k + off, uint32_t(rows * (kD / 2)), bar);
          bulk_copy(rs + C::kCodeBytes, p.v + off, uint32_t(rows * (kD / 2)), bar);
        }
      };
      // kHalf: thread pt holds the K (pt < 64) or V scale of key 64 half + (pt & 63) in sk.
      const int srow = kHalf ? 64 * half + (pt & 63) : pt;
      auto load_scales = [&](int it) {
        const int j = it * kBN + srow;
        if constexpr (kHalf) {
          sk = j < p.L ? (pt < 64 ? p.k_scale : p.v_scale)[kv_base + j] : uint16_t(0);
        } else {
          sk = j < p.L ? p.k_scale[kv_base + j] : uint16_t(0);
          sv = j < p.L ? p.v_scale[kv_base + j] : uint16_t(0);
        }
      };
      auto store_scales = [&](int it) {
        uint8_t* sc = raw + (it & 1) * C::kRawStage + 2 * C::kCodeBytes;
        if constexpr (kHalf) {
          reinterpret_cast<uint32_t*>(sc)[(pt >> 6) * kBN + srow] = sk | uint32_t(sk) << 16;
        } else if constexpr (C::kAlu) {
          reinterpret_cast<uint32_t*>(sc)[tid] = sk | uint32_t(sk) << 16;
          reinterpret_cast<uint32_t*>(sc)[kBN + tid] = sv | uint32_t(sv) << 16;
        } else {
          reinterpret_cast<uint16_t*>(sc)[tid] = sk, reinterpret_cast<uint16_t*>(sc)[kBN + tid] = sv;
        }
      };
      if (n_rec > 0) issue(0), load_scales(0), store_scales(0);
      asm volatile("bar.sync %0, 128;\n" ::"r"(pbar) : "memory");  // tile 0's scales stored
      for (int it = 0; it < n_rec; ++it) {
        const int s = it % kStages;
        const bool more = it + 1 < n_rec;
        if (more) issue(it + 1), load_scales(it + 1);
        long long pr = probe_clock();
        mbar_wait(my_raw_full + (it & 1), (it >> 1) & 1);  // tile it's codes landed
        probe_lap(pt == 0, kPrProdRaw, pr);
        if (it >= kStages) mbar_wait(empty + s, ((it / kStages) - 1) & 1);
        probe_lap(pt == 0, kPrProdEmpty, pr);
        const uint8_t* rs = raw + (it & 1) * C::kRawStage;
        const uint16_t* sc = reinterpret_cast<const uint16_t*>(rs + 2 * C::kCodeBytes);
        uint8_t* ks = kv + s * 2 * kTileBytes;
        if constexpr (C::kSplitKV) {  // K published first: the S GEMM overlaps the V decode
          wgtq::tq_decode_tile_alu<0, 4>(rs, ks, tid, mh);
          proxy_fence();
          mbar_arrive(full + s);
          wgtq::tq_decode_tile_alu<4, 8>(rs, ks, tid, mh);
        } else if constexpr (kHalf) {
#if TQ_WG_DECODE_SKIP != 1
          wgtq::tq_decode_tile_alu<0, 4, true>(rs, ks, pt, mh, half);
#endif
        } else if constexpr (C::kAlu) {
          wgtq::tq_decode_tile_alu(rs, ks, tid, mh);
        } else {
#pragma unroll 2  // 4 spills at 56 registers
        for (int i = tid; i < 2 * kBN * 16; i += 128) {  // (K, V) x 128 rows x 16 chunks of 8
          const int which = i >> 11, r = (i >> 4) & (kBN - 1), c = i & 15;
          const uint32_t code =
              *reinterpret_cast<const uint32_t*>(rs + which * C::kCodeBytes + r * 64 + c * 4);
          const __half2 s2 = __half2half2(__ushort_as_half(sc[which * kBN + r]));
          uint32_t o[4];
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            uint32_t e = lut[((code >> (8 * b)) & 255) * 32 + lane];
            __half2 x = __hmul2(*reinterpret_cast<__half2*>(&e), s2);
            o[b] = *reinterpret_cast<uint32_t*>(&x);
          }
          *reinterpret_cast<uint4*>(ks + which * kTileBytes + sw128(r, c, kBN)) =
              make_uint4(o[0], o[1], o[2], o[3]);
        }
        }
        proxy_fence();  // generic-proxy writes, read by wgmma (async proxy)
        mbar_arrive(C::kSplitKV ? full_v + s : full + s);
        probe_lap(pt == 0, kPrProdDecode, pr), probe_count(pt == 0, kPrProdTiles);
        if (more) store_scales(it + 1);
        // Raw stage it & 1 free again, tile it + 1's scales stored.
        asm volatile("bar.sync %0, 128;\n" ::"r"(pbar) : "memory");
      }
      if constexpr (C::kTail) {
        if (p.tma) {
          // Exact-row tiles by TMA (the dense producer's 4 boxes, from the exact rows' maps):
          // thread 0 issues a tile once its stage is released; the other producer threads arrive
          // then too (the full barriers count the decode's 128 x kProdWgs arrivals). Each tile
          // lands on its own, with no wait behind the next tile's issue.
          for (int it = n_rec; it < n_tiles; ++it) {
            const int s = it % kStages;
            if (it >= kStages) mbar_wait(empty + s, ((it / kStages) - 1) & 1);
            if (tid != 0) {
              mbar_arrive(full + s);
              continue;
            }
            tma_kv_tile(kv + s * 2 * kTileBytes, &p.tmk, &p.tmv, (it - n_rec) * kBN, hk, full + s);
          }
          return;
        }
        // Exact-row tiles (TQ_PREFILL_TMA=0): the fp16 rows copied into the stage as they are
        // (64 a warpgroup); tile it is published once tile it + 1's copies are issued.
        const int64_t t_base = int64_t(hk) * p.t_head_stride;
        for (int it = n_rec; it < n_tiles; ++it) {
          const int s = it % kStages;
          if (it >= kStages) mbar_wait(empty + s, ((it / kStages) - 1) & 1);
          uint8_t* ks = kv + s * 2 * kTileBytes;
#pragma unroll 4
          for (int i = pt; i < kBN / 2 * 16; i += 128) {
            const int r = half * (kBN / 2) + (i >> 4), c = i & 15, j = (it - n_rec) * kBN + r;
            const bool ok = j < p.W;
            const int64_t off = (t_base + (ok ? j : 0)) * (kD * 2) + c * 16;
            const uint32_t o = sw128(r, c, kBN);
            cp_async16_zfill(ks + o, p.tk + off, ok ? 16 : 0);
            cp_async16_zfill(ks + kTileBytes + o, p.tv + off, ok ? 16 : 0);
          }
          cp_commit();
          if (it > n_rec) {
            cp_wait<1>();
            proxy_fence();
            mbar_arrive(full + (it - 1) % kStages);
          }
        }
        if (n_tiles > n_rec) {
          cp_wait<0>();
          proxy_fence();
          mbar_arrive(full + (n_tiles - 1) % kStages);
        }
      }
    } else {
      // ---- Producer: tile `it` into stage it % kStages once the consumers released it; a tile
      // is published (after its copies landed, fenced for the async proxy) when the next is issued.
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
      if (p.tma) {  // one thread: a tile = 4 boxes (K, V x two 64-column halves)
        if (tid == 0)
          for (int it = 0; it < n_tiles; ++it) {
            const int s = it % kStages;
            long long pr = probe_clock();
            if (it >= kStages) mbar_wait(empty + s, ((it / kStages) - 1) & 1);
            probe_lap(true, kPrProdEmpty, pr), probe_count(true, kPrProdTiles);
            tma_kv_tile(kv + s * 2 * kTileBytes, &p.tmk, &p.tmv, it * kBN, hk, full + s);
          }
        return;
      }
      const int64_t kv_base = int64_t(hk) * p.head_stride;
      for (int it = 0; it < n_tiles; ++it) {
        const int s = it % kStages;
        if (it >= kStages) mbar_wait(empty + s, ((it / kStages) - 1) & 1);
        uint8_t* ks = kv + s * 2 * kTileBytes;
        uint8_t* vs = ks + kTileBytes;
#pragma unroll 4
        for (int i = tid; i < kBN * 16; i += 128) {
          const int r = i >> 4, c = i & 15, j = it * kBN + r;
          const bool ok = j < p.L;
          const int64_t off = (kv_base + (ok ? j : 0)) * (kD * 2) + c * 16;
          const uint32_t o = sw128(r, c, kBN);
          cp_async16_zfill(ks + o, p.k + off, ok ? 16 : 0);
          cp_async16_zfill(vs + o, p.v + off, ok ? 16 : 0);
        }
        cp_commit();
        if (it > 0) {
          cp_wait<1>();
          proxy_fence();
          mbar_arrive(full + (it - 1) % kStages);
        }
      }
      if (n_tiles > 0) {
        cp_wait<0>();
        proxy_fence();
        mbar_arrive(full + (n_tiles - 1) % kStages);
      }
    }
    return;
  }

  // ---- Consumers: warpgroup cw owns rows r0 .. r0 + 63.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kConsRegs));
  wg_consume<kTq, C::kTail, kStages, C::kSplitKV>(p, {h, m0, n_rec, n_tiles}, 0, wg - C::kProdWgs,
                                                   tid, qs, kv, full, empty, full_v);
#endif
}

// Writes 1 from the sm_90a build, 2 from any other (the driver picks one build per device).
__global__ void prefill_wgmma_probe(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *flag = 1;
#else
  *flag = 2;
#endif
}

}  // namespace

bool prefill_wgmma_available(void* stream) {
  static int state = 0;  // 0 unknown, 1 yes, 2 no
  if (state != 0) return state == 1;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(as_stream(stream), &cap) != cudaSuccess ||
      cap != cudaStreamCaptureStatusNone)
    return false;  // no probe launch inside a capture
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
      prop.major != 9 || prop.minor != 0) {
    state = 2;
    return false;
  }
  int* flag = nullptr;
  int host = 0;
  CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  prefill_wgmma_probe<<<1, 1>>>(flag);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(flag));
  state = host == 1 ? 1 : 2;
  return state == 1;
}

bool prefill_wgmma_handles(const PrefillAttnArgs& a) {
  if (a.head_dim != 128 || a.window != 0 || a.T < 1 || a.n_head <= 0 || a.n_head_kv <= 0 ||
      a.n_head % a.n_head_kv != 0)
    return false;
  if (a.format == KvFormat::BF16) return !a.rotate_back && a.tail_len == 0;
  if (a.format != KvFormat::TurboQuant || !a.k_codec || !a.v_codec || !a.k_scale || !a.v_scale)
    return false;
  const TqCodecDev &kc = *a.k_codec, &vc = *a.v_codec;
  if (kc.bits != 4 || vc.bits != 4 || kc.head_dim != 128 || vc.head_dim != 128) return false;
  for (int i = 0; i < 16; ++i)
    if (kc.centroids[i] != vc.centroids[i]) return false;
  // The one-launch variant (rotation, exact rows) decodes by ALU only (symmetric centroids).
  return (!a.rotate_back && a.tail_len == 0) || prefill_wgmma_alu_decodes(kc.centroids);
}

bool prefill_wgmma_one_launch_enabled() {
  static const bool on = env_int("TQ_PREFILL_ONE_LAUNCH", 1) != 0;
  return on;
}

bool prefill_wgmma_one_launch(const PrefillAttnArgs& a, void* stream) {
  return prefill_wgmma_one_launch_enabled() && a.format == KvFormat::TurboQuant && a.rotate_back && prefill_wgmma_tq_enabled() &&
         prefill_wgmma_handles(a) && prefill_wgmma_available(stream);
}

bool prefill_wgmma_enabled() {
  static const bool on = env_int("TQ_PREFILL_WGMMA", kDefaultOn) != 0;
  return on;
}

bool prefill_wgmma_tma_enabled() {
  static const bool on = env_int("TQ_PREFILL_TMA", 1) != 0;
  return on;
}

bool prefill_wgmma_tq_enabled() {
  static const bool on = env_int("TQ_PREFILL_WGMMA_TQ", kTqDefaultOn) != 0;
  return on;
}

namespace {
template <int kMode>
void launch_wgmma(const typename WgCfg<kMode>::Params& p, int64_t T, int n_head, cudaStream_t st) {
  constexpr int bytes = WgCfg<kMode>::kSmemBytes;
  static bool attr = false;  // per instantiation; the kernels run on one device
  if (!attr) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_kernel<kMode>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    attr = true;
  }
  const int64_t mb = (T + kBM - 1) / kBM;
  if (mb > 65535) raise("prefill_attention_wgmma: T=" + std::to_string(T) + " exceeds the grid");
  prefill_wgmma_kernel<kMode><<<dim3(unsigned(n_head), unsigned(mb)), WgCfg<kMode>::kThreads, bytes, st>>>(p);
  CUDA_CHECK(cudaGetLastError());
}
}  // namespace

TqDecode prefill_wgmma_tq_decode() {
  static const TqDecode d = [] {
    const char* e = std::getenv("TQ_PREFILL_TQ_DECODE");
    if (e && std::string(e) == "table") return TqDecode::kTable;
    if (e && std::string(e) == "alu") return TqDecode::kAlu;
    return kTqAluDefault ? TqDecode::kAlu : TqDecode::kTable;
  }();
  return d;
}

bool prefill_wgmma_alu_decodes(const float (&centroids)[16]) {
  return wgtq::centroids_symmetric(centroids);
}

std::string prefill_wgmma_probe_report() {
#if TQ_WG_WAIT_PROBE
  unsigned long long h[kPrSlots] = {};
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpyFromSymbol(h, g_wait_probe, sizeof(h)));
  const unsigned long long zero[kPrSlots] = {};
  CUDA_CHECK(cudaMemcpyToSymbol(g_wait_probe, zero, sizeof(zero)));
  const auto per = [](unsigned long long v, unsigned long long n) {
    return std::to_string(n ? (v + n / 2) / n : 0);
  };
  return "cycles a tile: consumers waiting for a full stage " + per(h[kPrConsFull], h[kPrConsTiles]) +
         " (" + std::to_string(h[kPrConsTiles]) + " warpgroup tiles); producers waiting for codes " +
         per(h[kPrProdRaw], h[kPrProdTiles]) + ", for a free stage " + per(h[kPrProdEmpty], h[kPrProdTiles]) +
         ", decoding and publishing " + per(h[kPrProdDecode], h[kPrProdTiles]) + " (" +
         std::to_string(h[kPrProdTiles]) + " tiles); consumers' S GEMM " + per(h[kPrConsS], h[kPrConsDone]) +
         ", softmax " + per(h[kPrConsSoftmax], h[kPrConsDone]) + ", PV GEMM " + per(h[kPrConsPV], h[kPrConsDone]) +
         " (" + std::to_string(h[kPrConsDone]) + " computed warpgroup tiles)";
#else
  return {};
#endif
}

void prefill_attention_wgmma(const PrefillAttnArgs& a, void* stream, TqDecode decode) {
  if (!prefill_wgmma_handles(a)) raise("prefill_attention_wgmma: unsupported shape or format");
  if (!prefill_wgmma_available(stream)) raise("prefill_attention_wgmma: needs an sm_90 device");
  const int64_t big = int64_t(1) << 29;
  if (a.T >= big || a.L < 0 || a.L >= big || std::llabs(a.q_pos0) >= big ||
      std::llabs(a.k_pos0) >= big || (a.L > 0 && a.head_stride < a.L) ||
      a.head_stride >= (int64_t(1) << 40) || a.tail_len < 0 || a.tail_len >= big ||
      (a.tail_len > 0 && (!a.tail_k || !a.tail_v || a.tail_stride < a.tail_len ||
                          a.tail_stride >= (int64_t(1) << 40))))
    raise("prefill_attention_wgmma: positions or lengths out of range");
  const bool tq = a.format == KvFormat::TurboQuant;
  WgParams p{};
  p.q = a.q, p.out = a.out, p.lse = a.lse;
  p.k = static_cast<const uint8_t*>(a.k), p.v = static_cast<const uint8_t*>(a.v);
  p.k_scale = a.k_scale, p.v_scale = a.v_scale;
  p.head_stride = a.head_stride, p.T = int(a.T), p.L = int(a.L), p.off = int(a.q_pos0 - a.k_pos0);
  p.n_head = a.n_head, p.group = a.n_head / a.n_head_kv, p.causal = a.causal;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(float(kD));
  p.q_mul = scale * kLog2e;
  p.v_lbo = kBN * 128, p.v_sbo = 1024;
  if (tq)
    for (int i = 0; i < 16; ++i) p.cent[i] = a.k_codec->centroids[i];
  if (decode == TqDecode::kDefault) decode = prefill_wgmma_tq_decode();
  if (tq && decode == TqDecode::kAlu && !prefill_wgmma_alu_decodes(p.cent))
    decode = TqDecode::kTable;  // (the ALU decode stores magnitudes only)
  if (a.rotate_back) {  // prefill_wgmma_handles: TurboQuant, symmetric centroids
    WgTailParams tp{};
    static_cast<WgParams&>(tp) = p;
    tp.tk = reinterpret_cast<const uint8_t*>(a.tail_k), tp.tv = reinterpret_cast<const uint8_t*>(a.tail_v);
    tp.t_head_stride = a.tail_stride, tp.W = int(a.tail_len);
    // The exact rows' maps (fp16 bits under the bf16 element type: TMA copies them as they are).
    tp.tma = prefill_wgmma_tma_enabled() && a.tail_len > 0 &&
             encode_kv_map(&tp.tmk, a.tail_k, a.tail_len, a.tail_stride, a.n_head_kv) &&
             encode_kv_map(&tp.tmv, a.tail_v, a.tail_len, a.tail_stride, a.n_head_kv);
    for (int i = 0; i < 4; ++i) tp.sign_in[i] = a.v_codec->sign_in[i], tp.sign_out[i] = a.v_codec->sign_out[i];
    if (prefill_wgmma_ring_enabled() && prefill_attention_wgmma_ring(a, tp, stream)) return;
    return launch_wgmma<kTqAluTail>(tp, a.T, a.n_head, as_stream(stream));
  }
  if (!tq) {
    p.tma = prefill_wgmma_tma_enabled() &&
            encode_kv_map(&p.tmk, a.k, a.L, a.head_stride, a.n_head_kv) &&
            encode_kv_map(&p.tmv, a.v, a.L, a.head_stride, a.n_head_kv);
    launch_wgmma<kDense>(p, a.T, a.n_head, as_stream(stream));
  }
  else if (decode == TqDecode::kTable)
    launch_wgmma<kTqTable>(p, a.T, a.n_head, as_stream(stream));
  else
    launch_wgmma<kTqAlu>(p, a.T, a.n_head, as_stream(stream));
}

}  // namespace tq::cuda
