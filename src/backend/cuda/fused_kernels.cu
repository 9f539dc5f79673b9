// Dense KV storage and fused kernels of the CUDA backend's engine path: f32 rows <-> bf16
// head-major KV stores (also one batched append over many stores), the iota table split-K decode
// reads its lengths from, RMSNorm that also writes the bf16 GEMM input, SwiGLU writing bf16, and
// per-head q/k RMSNorm + RoPE in one pass (optionally with the new tokens' KV append, bf16 or
// TurboQuant, in the same launch).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ops_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_encode_vec.cuh"

namespace tq::cuda {
namespace {

inline unsigned blocks_for(int64_t n, int threads) {
  return unsigned(std::min<int64_t>((n + threads - 1) / threads, 1 << 20));
}

// Element e of the T x n_head_kv x head_dim new rows (token-major) <-> slot at + t of head h.
__global__ void kv_write_kernel(const float* k, const float* v, __nv_bfloat16* dk,
                                __nv_bfloat16* dv, int64_t at, int64_t T, int64_t hk, int64_t d,
                                int64_t cap) {
  pdl_enter();
  const int64_t n = T * hk * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % d, th = e / d, h = th % hk, t = th / hk;
    const int64_t o = (h * cap + at + t) * d + i;
    dk[o] = __float2bfloat16_rn(k[e]);
    dv[o] = __float2bfloat16_rn(v[e]);
  }
}

// One block per (sequence, kv head) of a batched append: row seqs[b].row of k, v
// [*, n_head_kv, head_dim] to slot seqs[b].len of the sequence's own bf16 store (head stride
// seqs[b].head_stride tokens); same conversion as kv_write_kernel.
__global__ void kv_append_batch_kernel(const DecodeSeqDesc* seqs, const float* k, const float* v,
                                       int hk, int d) {
  const DecodeSeqDesc s = seqs[blockIdx.x / hk];
  const int64_t h = blockIdx.x % hk;
  const int64_t src = (int64_t(s.row) * hk + h) * d, dst = (h * s.head_stride + s.len) * d;
  __nv_bfloat16* dk = static_cast<__nv_bfloat16*>(const_cast<void*>(s.k));
  __nv_bfloat16* dv = static_cast<__nv_bfloat16*>(const_cast<void*>(s.v));
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    dk[dst + i] = __float2bfloat16_rn(k[src + i]);
    dv[dst + i] = __float2bfloat16_rn(v[src + i]);
  }
}

__global__ void kv_read_kernel(const __nv_bfloat16* sk, const __nv_bfloat16* sv, float* k,
                               float* v, int64_t at, int64_t T, int64_t hk, int64_t d,
                               int64_t cap) {
  const int64_t n = T * hk * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % d, th = e / d, h = th % hk, t = th / hk;
    const int64_t o = (h * cap + at + t) * d + i;
    k[e] = __bfloat162float(sk[o]);
    v[e] = __bfloat162float(sv[o]);
  }
}

__global__ void iota_kernel(int32_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = int32_t(i);
}

// Block-wide sum (blockDim.x a multiple of 32, <= 1024); every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float red[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) red[0] = s;
  }
  __syncthreads();
  const float total = red[0];
  __syncthreads();  // red is reused by a later call
  return total;
}

// One block per row: out = w * (x / rms(x)) in f32 and as bf16 (the next GEMM's input).
__global__ void rms_norm_bf16_kernel(const float* x, int64_t n, const float* w, float eps,
                                     float* out, __nv_bfloat16* out_bf16) {
  const float* xr = x + int64_t(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  const float inv = 1.0f / sqrtf(block_sum(ss) / float(n) + eps);
  float* yr = out + int64_t(blockIdx.x) * n;
  __nv_bfloat16* br = out_bf16 + int64_t(blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float y = w[i] * (xr[i] * inv);
    yr[i] = y;
    br[i] = __float2bfloat16_rn(y);
  }
}

__global__ void swiglu_bf16_kernel(const float* gate, const float* up, __nv_bfloat16* out,
                                   int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * up[i]);
  }
}

// Where qk_norm_rope_kernel<kAppend> stores the keys and values of its rows (kAppendNone:
// nowhere): token t, kv head h goes to slot dst.len + t of a bf16 store (kAppendBf16: dst.k,
// dst.v, head stride dst.head_stride tokens, as kv_write_kernel), or is encoded to record
// dst.len + t of a TurboQuant store (kAppendTq, head_dim 128, as tq_encode_rows: codes and scales,
// and with dst.k_tail set the rotated rows at exact row dst.tail_len + t).
// kRotateQ: no append; the q rows leave rotated by ap.kc (R_k q, as tq_rotate: head_dim 128).
enum : int { kAppendNone = 0, kAppendBf16 = 1, kAppendTq = 2, kRotateQ = 3 };
struct AppendDest {
  DecodeSeqDesc dst;
  const float* v = nullptr;  // the rows' values [T, n_head_kv, head_dim] f32
  TqCodecDev kc, vc;
  int defer_record = 0;  // kAppendTq: the window rows only (launch_record_encode writes the records)
};

// One block per head row of q (rows [0, T * n_head)) then k: optional RMSNorm over the head
// (weight w, as rms_norm_kernel) then rotate-half RoPE at position pos0 + t (pos[t] when pos is
// set). Thread i < half owns the pair (i, i + half). With kAppend, the k rows' blocks also store
// the rotated key and its value (AppendDest): the KV append fused into the same launch.
template <int kAppend>
__global__ void qk_norm_rope_kernel(float* q, float* k, int64_t n_head, int64_t n_head_kv,
                                    int64_t q_rows, int64_t d, const float* q_w, const float* k_w,
                                    float eps, int64_t pos0, const float* inv_freq,
                                    const int32_t* pos, __grid_constant__ const AppendDest ap) {
  const int64_t r = blockIdx.x;
  const bool is_q = r < q_rows;
  const int64_t t = is_q ? r / n_head : (r - q_rows) / n_head_kv;
  float* x = is_q ? q + r * d : k + (r - q_rows) * d;
  const float* w = is_q ? q_w : k_w;
  const int64_t half = d / 2, i = threadIdx.x;
  const bool live = i < half;
  // The norm weights before the wait (no kernel writes them): their loads overlap the previous
  // kernel instead of following the inputs' (session 8: the decode step's q/k segment 3.46 ->
  // 2.59 us a layer dense, 5.70 -> 5.09 TurboQuant).
  const float w1 = w && live ? w[i] : 1.0f, w2 = w && live ? w[i + half] : 1.0f;
  pdl_enter();
  float x1 = live ? x[i] : 0.0f, x2 = live ? x[i + half] : 0.0f;
  if (w) {
    const float inv = 1.0f / sqrtf(block_sum(x1 * x1 + x2 * x2) / float(d) + eps);
    if (live) x1 = w1 * (x1 * inv), x2 = w2 * (x2 * inv);
  }
  float y1 = 0.0f, y2 = 0.0f;
  if (live) {
    const float a = float(pos ? int64_t(pos[t]) : pos0 + t) * inv_freq[i];
    float s, c;
    sincosf(a, &s, &c);
    y1 = x1 * c - x2 * s;
    y2 = x2 * c + x1 * s;
    if (kAppend != kRotateQ || !is_q) x[i] = y1, x[i + half] = y2;
  }
  if constexpr (kAppend == kRotateQ) {
    // head_dim 128, 64 threads: the row through shared memory, rotated by warp 0 (the butterflies
    // of tq_rotate's rows, so the same bits).
    if (!is_q) return;  // the whole block
    __shared__ float row[128];
    row[i] = y1;
    row[i + half] = y2;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int lane = int(threadIdx.x);
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = row[4 * lane + j];
    warp_rotate<4>(v, lane, ap.kc.sign_in, ap.kc.sign_out);
#pragma unroll
    for (int j = 0; j < 4; ++j) x[4 * lane + j] = v[j];
    return;
  }
  if constexpr (kAppend != kAppendNone) {
    if (is_q) return;  // the whole block
    const int64_t kr = r - q_rows, h = kr % n_head_kv;
    const float* vr = ap.v + kr * d;
    const DecodeSeqDesc& s = ap.dst;
    if constexpr (kAppend == kAppendBf16) {
      if (!live) return;
      const int64_t o = (h * s.head_stride + s.len + t) * d;
      __nv_bfloat16* dk = static_cast<__nv_bfloat16*>(const_cast<void*>(s.k));
      __nv_bfloat16* dv = static_cast<__nv_bfloat16*>(const_cast<void*>(s.v));
      dk[o + i] = __float2bfloat16_rn(y1);
      dk[o + i + half] = __float2bfloat16_rn(y2);
      dv[o + i] = __float2bfloat16_rn(vr[i]);
      dv[o + i + half] = __float2bfloat16_rn(vr[i + half]);
    } else {  // head_dim 128, 64 threads: warp 0 encodes the key (from shared memory), warp 1 the value
      __shared__ float key[128];
      key[i] = y1;
      key[i + half] = y2;
      __syncthreads();
      const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
      const float* tail = warp ? s.v_tail : s.k_tail;
      float* rot = tail ? const_cast<float*>(tail) + (h * s.tail_head_stride + s.tail_len + t) * 128
                        : nullptr;
      if (ap.defer_record)
        rotate_vec<128>(warp ? vr : key, warp ? ap.vc : ap.kc, rot, lane);
      else
        encode_vec<128>(warp ? vr : key, warp ? ap.vc : ap.kc,
                        static_cast<uint8_t*>(const_cast<void*>(warp ? s.v : s.k)),
                        const_cast<uint16_t*>(warp ? s.v_scale : s.k_scale),
                        h * s.head_stride + s.len + t, rot, lane);
    }
  }
}

}  // namespace

void launch_kv_write(const float* k, const float* v, void* dk, void* dv, int64_t at, int64_t T,
                     int64_t n_head_kv, int64_t head_dim, int64_t cap, Stream stream) {
  const int64_t n = T * n_head_kv * head_dim;
  if (n <= 0) return;
  launch_pdl(kv_write_kernel, dim3(blocks_for(n, 256)), dim3(256), 0, as_stream(stream), k, v,
             static_cast<__nv_bfloat16*>(dk), static_cast<__nv_bfloat16*>(dv), at, T, n_head_kv,
             head_dim, cap);
  check_last_launch("kv_write");
}

void launch_kv_read(const void* sk, const void* sv, float* k, float* v, int64_t at, int64_t T,
                    int64_t n_head_kv, int64_t head_dim, int64_t cap, Stream stream) {
  const int64_t n = T * n_head_kv * head_dim;
  if (n <= 0) return;
  kv_read_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(
      static_cast<const __nv_bfloat16*>(sk), static_cast<const __nv_bfloat16*>(sv), k, v, at, T,
      n_head_kv, head_dim, cap);
  check_last_launch("kv_read");
}

namespace {
// A small table carried in the launch's parameters (kTableChunkBytes, under the classic 4 KB limit
// with the other parameters) and stored to device memory by the kernel: an upload that is just
// another kernel in the stream (PDL-chained, no copy engine, no pinned staging or event).
constexpr int kTableChunkBytes = 4032;
struct TableChunk {
  uint4 w[kTableChunkBytes / 16];
};
__global__ void table_store_kernel(uint4* dst, int n, __grid_constant__ const TableChunk c) {
  pdl_enter();  // the previous kernels (readers of the old table) have finished
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = c.w[i];
}
}  // namespace

void launch_table_store(void* dst, const void* src, size_t bytes, Stream stream) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) raise("table_store: dst must be 16-byte aligned");
  auto* d = static_cast<uint4*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < bytes; off += kTableChunkBytes) {
    const size_t n = std::min<size_t>(kTableChunkBytes, bytes - off);
    TableChunk c{};
    std::memcpy(&c, s + off, n);
    const int words = int((n + 15) / 16);
    launch_pdl(table_store_kernel, dim3(1), dim3(256), 0, as_stream(stream), d + off / 16, words, c);
    check_last_launch("table_store");
  }
}

void launch_iota(int32_t* p, int64_t n, Stream stream) {
  if (n <= 0) return;
  iota_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(p, n);
  check_last_launch("iota");
}

void launch_rms_norm_bf16(const float* x, int64_t rows, int64_t n, const float* w, float eps,
                          float* out, void* out_bf16, Stream stream) {
  if (rows <= 0) return;
  const int threads = n >= 1024 ? 512 : (n >= 256 ? 128 : 32);
  rms_norm_bf16_kernel<<<unsigned(rows), threads, 0, as_stream(stream)>>>(
      x, n, w, eps, out, static_cast<__nv_bfloat16*>(out_bf16));
  check_last_launch("rms_norm_bf16");
}

void launch_swiglu_bf16(const float* gate, const float* up, void* out_bf16, int64_t n,
                        Stream stream) {
  if (n <= 0) return;
  swiglu_bf16_kernel<<<blocks_for(n, 256), 256, 0, as_stream(stream)>>>(
      gate, up, static_cast<__nv_bfloat16*>(out_bf16), n);
  check_last_launch("swiglu_bf16");
}

namespace {
// Both forms: positions pos0 + t, or pos[row] when pos is non-null; with an AppendDest (kind
// kAppendBf16 / kAppendTq) the fused append.
void qk_norm_rope_any(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                      int64_t head_dim, const float* q_w, const float* k_w, float eps,
                      int64_t pos0, const int32_t* pos, const float* inv_freq, Stream stream,
                      int kind = kAppendNone, const AppendDest& ap = AppendDest{}) {
  const int64_t rows = T * (n_head + n_head_kv);
  if (rows <= 0) return;
  if (head_dim % 2 != 0 || head_dim > 2048)
    raise("qk_norm_rope: head_dim " + std::to_string(head_dim) + " is not supported");
  if ((kind == kAppendTq || kind == kRotateQ) && head_dim != 128)
    raise("qk_norm_rope: TurboQuant needs head_dim 128");
  const int threads = int((head_dim / 2 + 31) / 32 * 32);
  auto go = [&](auto kernel) {
    launch_pdl(kernel, dim3(unsigned(rows)), dim3(unsigned(threads)), 0, as_stream(stream), q, k,
               n_head, n_head_kv, T * n_head, head_dim, q_w, k_w, eps, pos0, inv_freq, pos, ap);
  };
  if (kind == kAppendBf16)
    go(qk_norm_rope_kernel<kAppendBf16>);
  else if (kind == kAppendTq)
    go(qk_norm_rope_kernel<kAppendTq>);
  else if (kind == kRotateQ)
    go(qk_norm_rope_kernel<kRotateQ>);
  else
    go(qk_norm_rope_kernel<kAppendNone>);
  check_last_launch("qk_norm_rope");
}
}  // namespace

void launch_qk_norm_rope(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                         int64_t head_dim, const float* q_w, const float* k_w, float eps,
                         int64_t pos0, const float* inv_freq, Stream stream) {
  qk_norm_rope_any(q, k, T, n_head, n_head_kv, head_dim, q_w, k_w, eps, pos0, nullptr, inv_freq,
                   stream);
}

void launch_qk_norm_rope_rotate_q(float* q, float* k, int64_t T, int64_t n_head,
                                  int64_t n_head_kv, int64_t head_dim, const float* q_w,
                                  const float* k_w, float eps, int64_t pos0,
                                  const float* inv_freq, const TqCodecDev& kc, void* stream) {
  AppendDest ap;
  ap.kc = kc;
  qk_norm_rope_any(q, k, T, n_head, n_head_kv, head_dim, q_w, k_w, eps, pos0, nullptr, inv_freq,
                   stream, kRotateQ, ap);
}

void launch_qk_norm_rope_rows(float* q, float* k, int64_t T, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, const float* q_w, const float* k_w, float eps,
                              const int32_t* pos, const float* inv_freq, Stream stream) {
  qk_norm_rope_any(q, k, T, n_head, n_head_kv, head_dim, q_w, k_w, eps, 0, pos, inv_freq, stream);
}

void launch_qk_norm_rope_append(float* q, float* k, const float* v, int64_t T, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, const float* q_w,
                                const float* k_w, float eps, int64_t pos0, const float* inv_freq,
                                const DecodeSeqDesc& dst, const TqCodecDev* kc,
                                const TqCodecDev* vc, bool defer_record, void* stream) {
  AppendDest ap;
  ap.dst = dst;
  ap.v = v;
  if (kc && vc) ap.kc = *kc, ap.vc = *vc;
  if (defer_record && !(kc && vc && dst.k_tail && T == 1))
    raise("qk_norm_rope_append: a deferred record needs TurboQuant, an exact window and one token");
  ap.defer_record = defer_record ? 1 : 0;
  qk_norm_rope_any(q, k, T, n_head, n_head_kv, head_dim, q_w, k_w, eps, pos0, nullptr, inv_freq,
                   stream, kc && vc ? kAppendTq : kAppendBf16, ap);
}

void launch_kv_append_batch(const DecodeSeqDesc* seqs, int n_seq, const float* k, const float* v,
                            int n_head_kv, int head_dim, Stream stream) {
  if (n_seq <= 0) return;
  kv_append_batch_kernel<<<unsigned(n_seq * n_head_kv), 128, 0, as_stream(stream)>>>(
      seqs, k, v, n_head_kv, head_dim);
  check_last_launch("kv_append_batch");
}

}  // namespace tq::cuda
