// Host-side CUDA helpers compiled by the C++ compiler: raise(), device queries, availability,
// and the conversion of a quant::VectorCodec into the kernels' TqCodecDev.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_host_check.h"
#include "backend/cuda/tq_cuda.h"
#include "core/error.h"
#include "quant/vector_codec.h"

namespace tq {

bool cuda_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::string cuda_device_summary(int device) {
  if (!cuda_available()) return "no CUDA device (driver or GPU absent)";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "cudaGetDeviceProperties failed";
  return fmt::format("{} sm_{}{} {} SMs {:.1f} GiB, L2 {} MiB", p.name, p.major, p.minor,
                     p.multiProcessorCount, double(p.totalGlobalMem) / (1 << 30),
                     p.l2CacheSize >> 20);
}

void cuda_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

MemoryCapacity cuda_memory_capacity(int device) {
  if (!cuda_available()) return {};
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) return {};
  if (current != device && cudaSetDevice(device) != cudaSuccess) return {};
  size_t free = 0, total = 0;
  cudaError_t st = cudaMemGetInfo(&free, &total);
  if (current != device) cudaSetDevice(current);
  if (st != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {uint64_t(total), uint64_t(free)};
}

}  // namespace tq

namespace tq::cuda {

void raise(const std::string& msg) { throw Error(msg); }

double time_median_ms(void (*fn)(void*), void* ctx, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn(ctx);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(size_t(2 * iters));
  for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i)], nullptr));
    fn(ctx);
    CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i + 1)], nullptr));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    float m = 0;
    CUDA_CHECK(cudaEventElapsedTime(&m, ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
    ms[size_t(i)] = m;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void* stream_create() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void stream_destroy(void* stream) { CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream))); }
void stream_synchronize(void* stream) {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

double time_graph_ms(void (*fn)(void*, void*), void* ctx, int per_graph, int reps) {
  const auto st = static_cast<cudaStream_t>(stream_create());
  for (int i = 0; i < 3; ++i) fn(ctx, st);  // warm-up outside the capture (allocations, setup)
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) fn(ctx, st);
  CUDA_CHECK(cudaStreamEndCapture(st, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_CHECK(cudaGraphLaunch(ge, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaEvent_t a = nullptr, b = nullptr;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(a, st));
    CUDA_CHECK(cudaGraphLaunch(ge, st));
    CUDA_CHECK(cudaEventRecord(b, st));
    CUDA_CHECK(cudaEventSynchronize(b));
    float m = 0;
    CUDA_CHECK(cudaEventElapsedTime(&m, a, b));
    ms.push_back(double(m) / per_graph);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  stream_destroy(st);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double measure_copy_gbps(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  fill_random_bytes(a, bytes, 1);
  struct Ctx {
    void *a, *b;
    size_t n;
  } c{a, b, bytes};
  double ms = time_median_ms(
      [](void* p) {
        auto* c = static_cast<Ctx*>(p);
        cudaMemcpyAsync(c->b, c->a, c->n, cudaMemcpyDeviceToDevice, nullptr);
      },
      &c, 3, 20);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo d;
  d.sm_major = prop.major;
  d.sm_minor = prop.minor;
  d.n_sm = prop.multiProcessorCount;
  d.smem_per_block_optin = int64_t(prop.sharedMemPerBlockOptin);
  return d;
}

TqCodecDev make_tq_codec_dev(const quant::VectorCodec& codec) {
  const auto& c = codec.config();
  if (c.width.fractional() || c.width.low_bits() != 4)
    fail("CUDA TurboQuant kernels support 4-bit codes, not {} bits", c.width.name());
  if (c.rotation != quant::RotationKind::Hadamard)
    raise("CUDA TurboQuant kernels support the Hadamard rotation only");
  if (c.norm.fp32) raise("CUDA TurboQuant kernels support fp16 scales only");
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    raise("CUDA TurboQuant kernels support head_dim 64, 128, 256, not " +
          std::to_string(c.head_dim));
  TqCodecDev d;
  d.head_dim = c.head_dim;
  d.bits = 4;
  d.corrected = c.norm.corrected;
  const quant::Codebook& cb = codec.codebook_for(0);
  for (uint32_t i = 0; i < 16; ++i) d.centroids[sign_magnitude_code(i)] = cb.centroids[size_t(i)];
  for (int i = 0; i < 15; ++i) d.boundaries[i] = cb.boundaries[size_t(i)];
  const auto& s1 = codec.rotation().signs_in();
  const auto& s2 = codec.rotation().signs_out();
  for (int i = 0; i < c.head_dim; ++i) {
    if (s1[size_t(i)] < 0) d.sign_in[i / 32] |= 1u << (i % 32);
    if (s2[size_t(i)] < 0) d.sign_out[i / 32] |= 1u << (i % 32);
  }
  return d;
}

void shared_centroids(const TqCodecDev& k, const TqCodecDev& v, float (&out)[16]) {
  for (int i = 0; i < 16; ++i) {
    if (k.centroids[i] != v.centroids[i])
      raise("decode_attention: K and V codebooks differ (widths or head_dim)");
    out[i] = k.centroids[i];
  }
}

}  // namespace tq::cuda
