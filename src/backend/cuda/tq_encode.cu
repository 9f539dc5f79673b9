// TurboQuant on the device, write side: encoding K/V vectors into the device record layout (norm,
// Hadamard rotation by shuffles, Lloyd-Max quantization, packing): the bulk encoder for chunks and
// conversion slices (tq_encode_rows.cuh, from f32 or a bf16 store), one warp a vector for
// one-token appends and deferred records (encode_vec); plus random fills, shared-memory poisoning
// and conversions for tests and benchmarks.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tq_cuda.h"
#include "backend/cuda/tq_encode_rows.cuh"
#include "backend/cuda/tq_encode_vec.cuh"
#include "backend/cuda/tq_hadamard.cuh"

namespace tq::cuda {

void check_last_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    raise(std::string("CUDA launch of ") + what + " failed: " + cudaGetErrorString(e));
}

namespace {

// The baseline of encode_rows_kernel (TQ_ENCODE_KERNEL=warp): one warp per (token, head), the
// per-token path's encode_vec.
template <int D>
__global__ void __launch_bounds__(256) encode_warp_kernel(const float* x, int64_t n_token, int n_kv,
                                                          int64_t x_ts, int64_t x_hs,
                                                          const TqCodecDev c, uint8_t* codes,
                                                          uint16_t* scales, int64_t head_stride,
                                                          int64_t t0, float* rot, int64_t rot_hs,
                                                          int64_t rot_t0) {
  const int lane = threadIdx.x & 31;
  const int64_t vec = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (vec >= n_token * n_kv) return;
  const int64_t t = vec / n_kv;
  const int h = int(vec % n_kv);
  encode_vec<D>(x + t * x_ts + h * x_hs, c, codes, scales, h * head_stride + t0 + t,
                rot ? rot + (int64_t(h) * rot_hs + rot_t0 + t) * D : nullptr, lane);
}

// Batched append: one warp per (K or V, sequence, kv head); sequence b's row seqs[b].row of
// x [*, n_kv, D] goes to record seqs[b].len of its own codes / scales (head stride
// seqs[b].head_stride) and, with a tail, to exact row seqs[b].tail_len of k_tail / v_tail.
template <int D>
__global__ void __launch_bounds__(256) encode_batch_kernel(const DecodeSeqDesc* seqs, int n_seq,
                                                           int n_kv, const float* k,
                                                           const float* v,
                                                           __grid_constant__ const TqCodecDev kc,
                                                           __grid_constant__ const TqCodecDev vc) {
  const int lane = threadIdx.x & 31;
  const int64_t vec = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int64_t per = int64_t(n_seq) * n_kv;
  if (vec >= 2 * per) return;
  const bool is_v = vec >= per;
  const int64_t r = is_v ? vec - per : vec;
  const DecodeSeqDesc& s = seqs[r / n_kv];
  const int h = int(r % n_kv);
  const float* src = (is_v ? v : k) + (int64_t(s.row) * n_kv + h) * D;
  uint8_t* codes = static_cast<uint8_t*>(const_cast<void*>(is_v ? s.v : s.k));
  uint16_t* scales = const_cast<uint16_t*>(is_v ? s.v_scale : s.k_scale);
  const float* tail = is_v ? s.v_tail : s.k_tail;
  float* rot = tail ? const_cast<float*>(tail) + (h * s.tail_head_stride + s.tail_len) * D
                    : nullptr;
  encode_vec<D>(src, is_v ? vc : kc, codes, scales, h * s.head_stride + s.len, rot, lane);
}

// Deferred records (launch_record_encode): warp w < n_kv encodes key row w, the next n_kv warps
// the value rows. Released at once, waits for the previous kernel (the attention) at the end.
__global__ void __launch_bounds__(256) record_encode_kernel(__grid_constant__ const RecordJob job) {
  pdl_release();
  const int vec = int(blockIdx.x) * (blockDim.x / 32) + int(threadIdx.x >> 5);
  if (vec < 2 * job.n_head_kv)
    encode_record(job, vec % job.n_head_kv, vec >= job.n_head_kv, int(threadIdx.x & 31));
  pdl_wait();  // every thread: this grid ends after the attention before it
}

// Test aid (tq_quantize_probe): each value's index by the bulk encoder's table, and whether the
// table passed its check for this codec.
__global__ void quantize_probe_kernel(const float* y, int64_t n, const TqCodecDev c, uint8_t* idx,
                                      int* table_ok) {
  __shared__ QuantTable table;
  const bool ok = build_quant_table(table, c);
  if (blockIdx.x == 0 && threadIdx.x == 0) *table_ok = ok ? 1 : 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    idx[i] = uint8_t(quantize_table(y[i], table));
}

__global__ void f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    __nv_bfloat16 b = __float2bfloat16_rn(x[i]);
    y[i] = *reinterpret_cast<uint16_t*>(&b);
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_bytes_kernel(uint64_t* p, size_t n_words, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = mix64(seed + i * 0x9e3779b97f4a7c15ull);
}

__global__ void fill_16_kernel(uint16_t* p, int64_t n, float lo, float hi, bool bf16,
                               uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(mix64(seed + uint64_t(i) * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
    const float v = lo + (hi - lo) * u;
    if (bf16) {
      __nv_bfloat16 b = __float2bfloat16_rn(v);
      p[i] = *reinterpret_cast<uint16_t*>(&b);
    } else {
      __half h = __float2half_rn(v);
      p[i] = *reinterpret_cast<uint16_t*>(&h);
    }
  }
}

// Test aid: fills every SM's shared memory with 0xFF bytes (NaN as f32 / f16), so that a kernel
// reading shared memory it did not write shows it.
__global__ void poison_smem_kernel(int words) {
  extern __shared__ uint32_t sm[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) sm[i] = 0xffffffffu;
}

// Test aid (copy_rows_late): releases the next kernel at once, spins ~spin_ns, then waits for the
// previous kernel and copies the rows.
__global__ void late_rows_kernel(uint8_t* dst, const uint8_t* src, int64_t row_bytes,
                                 int64_t stride, int n_rows, int64_t spin_ns) {
  pdl_release();
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (int64_t(t - t0) < spin_ns);
  pdl_wait();
  for (int64_t i = threadIdx.x; i < n_rows * row_bytes; i += blockDim.x) {
    const int64_t r = i / row_bytes, c = i % row_bytes;
    dst[r * stride + c] = src[r * stride + c];
  }
}

}  // namespace

void copy_rows_late(void* dst, const void* src, int64_t row_bytes, int64_t stride_bytes,
                    int n_rows, int64_t spin_ns, void* stream) {
  launch_pdl(late_rows_kernel, dim3(1), dim3(256), 0, as_stream(stream),
             static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), row_bytes,
             stride_bytes, n_rows, spin_ns);
  check_last_launch("copy_rows_late");
}

void fill_random_bytes(void* p, size_t bytes, uint64_t seed, void* stream) {
  const size_t words = bytes / 8;  // callers pass multiples of 8
  if (words == 0) return;
  fill_bytes_kernel<<<1024, 256, 0, as_stream(stream)>>>(static_cast<uint64_t*>(p), words, seed);
  check_last_launch("fill_random_bytes");
}

void fill_random_16(uint16_t* p, int64_t n, float lo, float hi, bool bf16, uint64_t seed,
                    void* stream) {
  if (n <= 0) return;
  fill_16_kernel<<<1024, 256, 0, as_stream(stream)>>>(p, n, lo, hi, bf16, seed);
  check_last_launch("fill_random_16");
}

void tq_encode(const float* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
               int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes, uint16_t* scales,
               int64_t head_stride, int64_t t0, void* stream) {
  tq_encode_rows_out(x, n_token, n_head_kv, x_token_stride, x_head_stride, codec, codes, scales,
                     head_stride, t0, TqRowsOut{}, stream);
}

bool encode_kernel_is_warp() {
  static const bool warp = [] {
    const char* e = std::getenv("TQ_ENCODE_KERNEL");
    return e && std::strcmp(e, "warp") == 0;
  }();
  return warp;
}

namespace {

// Blocks of the group encoder: one wave at its occupancy (blocks loop over vector groups).
template <int D, bool VEC, typename In>
unsigned encode_rows_grid(int64_t n_vec) {
  static const int wave = [] {
    int dev = 0, n_sm = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, encode_rows_kernel<D, VEC, In>,
                                                             256, 0));
    return std::max(1, n_sm * per_sm);
  }();
  return unsigned(std::min<int64_t>((n_vec + 31) / 32, wave));
}

template <int D, typename In>
void launch_encode_rows(const In* x, int64_t n_token, int n_kv, int64_t x_ts, int64_t x_hs,
                        const TqCodecDev& c, uint8_t* codes, uint16_t* scales,
                        int64_t head_stride, int64_t t0, const TqRowsOut& rot, cudaStream_t st) {
  const int64_t n_vec = n_token * n_kv;
  constexpr int64_t per16 = 16 / int64_t(sizeof(In));
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_ts % per16 == 0 &&
                   x_hs % per16 == 0;
  if (vec)
    encode_rows_kernel<D, true, In><<<encode_rows_grid<D, true, In>(n_vec), 256, 0, st>>>(
        x, n_token, n_kv, x_ts, x_hs, c, codes, scales, head_stride, t0, rot);
  else
    encode_rows_kernel<D, false, In><<<encode_rows_grid<D, false, In>(n_vec), 256, 0, st>>>(
        x, n_token, n_kv, x_ts, x_hs, c, codes, scales, head_stride, t0, rot);
}

// f(std::integral_constant<int, D>) for head_dim D in {64, 128, 256}.
template <typename F>
void by_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
    default: raise("tq_encode: head_dim " + std::to_string(head_dim) + " is not supported");
  }
}

template <typename In>
void encode_rows_any(const In* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
                     int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes,
                     uint16_t* scales, int64_t head_stride, int64_t t0, const TqRowsOut& rot,
                     void* stream) {
  if (n_token <= 0) return;
  // The window rows are written 16 bytes at a time: their rows must be 16-byte aligned.
  if ((rot.f32 && reinterpret_cast<uintptr_t>(rot.f32) % 16 != 0) ||
      (rot.f16 && reinterpret_cast<uintptr_t>(rot.f16) % 16 != 0))
    raise("tq_encode_rows: window rows not 16-byte aligned");
  cudaStream_t st = as_stream(stream);
  by_head_dim(codec.head_dim, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    if constexpr (std::is_same_v<In, float>) {
      if (encode_kernel_is_warp() && !rot.f16 && rot.f32_from == 0) {
        const int per_block = 8;
        const unsigned grid = unsigned((n_token * n_head_kv + per_block - 1) / per_block);
        encode_warp_kernel<D><<<grid, 32 * per_block, 0, st>>>(
            x, n_token, n_head_kv, x_token_stride, x_head_stride, codec, codes, scales,
            head_stride, t0, rot.f32, rot.f32_head_stride, rot.f32_t0);
        return;
      }
    }
    launch_encode_rows<D, In>(x, n_token, n_head_kv, x_token_stride, x_head_stride, codec, codes,
                              scales, head_stride, t0, rot, st);
  });
  check_last_launch("tq_encode");
}

// The f32 window rows of tq_encode_rows and tq_encode_rows_bf16 (none when rot is null).
TqRowsOut f32_rows(float* rot, int64_t rot_head_stride, int64_t rot_t0) {
  TqRowsOut o;
  o.f32 = rot;
  o.f32_head_stride = rot_head_stride;
  o.f32_t0 = rot_t0;
  return o;
}

}  // namespace

void tq_encode_rows(const float* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
                    int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes,
                    uint16_t* scales, int64_t head_stride, int64_t t0, float* rot,
                    int64_t rot_head_stride, int64_t rot_t0, void* stream) {
  encode_rows_any(x, n_token, n_head_kv, x_token_stride, x_head_stride, codec, codes, scales,
                  head_stride, t0, f32_rows(rot, rot_head_stride, rot_t0), stream);
}

void tq_encode_rows_out(const float* x, int64_t n_token, int n_head_kv, int64_t x_token_stride,
                        int64_t x_head_stride, const TqCodecDev& codec, uint8_t* codes,
                        uint16_t* scales, int64_t head_stride, int64_t t0, const TqRowsOut& out,
                        void* stream) {
  encode_rows_any(x, n_token, n_head_kv, x_token_stride, x_head_stride, codec, codes, scales,
                  head_stride, t0, out, stream);
}

void tq_encode_rows_bf16(const uint16_t* x, int64_t n_token, int n_head_kv,
                         int64_t x_token_stride, int64_t x_head_stride, const TqCodecDev& codec,
                         uint8_t* codes, uint16_t* scales, int64_t head_stride, int64_t t0,
                         float* rot, int64_t rot_head_stride, int64_t rot_t0, void* stream) {
  encode_rows_any(reinterpret_cast<const __nv_bfloat16*>(x), n_token, n_head_kv, x_token_stride,
                  x_head_stride, codec, codes, scales, head_stride, t0,
                  f32_rows(rot, rot_head_stride, rot_t0), stream);
}

void tq_encode_batch(const DecodeSeqDesc* seqs, int n_seq, int n_head_kv, const float* k,
                     const float* v, const TqCodecDev& kc, const TqCodecDev& vc, void* stream) {
  if (n_seq <= 0) return;
  if (kc.head_dim != 128 || vc.head_dim != 128)
    raise("tq_encode_batch: head_dim " + std::to_string(kc.head_dim) + " is not supported");
  const int64_t n_vec = 2 * int64_t(n_seq) * n_head_kv;
  const int per_block = 8;
  encode_batch_kernel<128><<<unsigned((n_vec + per_block - 1) / per_block), 32 * per_block, 0,
                             as_stream(stream)>>>(seqs, n_seq, n_head_kv, k, v, kc, vc);
  check_last_launch("tq_encode_batch");
}

void launch_record_encode(const RecordJob& job, void* stream) {
  if (job.kc.head_dim != 128 || job.vc.head_dim != 128) raise("launch_record_encode: head_dim 128 only");
  const int per_block = 8, n_vec = 2 * job.n_head_kv;
  launch_pdl(record_encode_kernel, dim3(unsigned((n_vec + per_block - 1) / per_block)),
             dim3(32 * per_block), 0, as_stream(stream), job);
  check_last_launch("record_encode");
}

void tq_quantize_probe(const float* y, int64_t n, const TqCodecDev& codec, uint8_t* idx,
                       int* table_ok, void* stream) {
  quantize_probe_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 1024)), 256, 0,
                          as_stream(stream)>>>(y, n, codec, idx, table_ok);
  check_last_launch("tq_quantize_probe");
}

void f32_to_bf16(const float* x, uint16_t* y, int64_t n, void* stream) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65535);
  f32_to_bf16_kernel<<<unsigned(blocks), 256, 0, as_stream(stream)>>>(x, y, n);
  check_last_launch("f32_to_bf16");
}

void poison_shared_memory(void* stream) {
  int dev = 0, n_sm = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CUDA_CHECK(cudaFuncSetAttribute(poison_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  poison_smem_kernel<<<n_sm, 1024, size_t(optin), as_stream(stream)>>>(optin / 4);
  check_last_launch("poison_smem_kernel");
}

}  // namespace tq::cuda
