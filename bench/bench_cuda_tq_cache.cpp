// CUDA benchmark of one attention layer's KV cache through the LayerCache interface (what the
// model runs): dense bf16 vs TurboQuant 4-bit in device memory (DeviceCompressedCache, recent
// exact 128), Qwen3-8B heads (32 q / 8 kv, d=128). Per context: the time of the last prefill
// chunk (attention + cache write of `chunk` tokens after ctx - chunk), then decode steps (one
// token each, synchronized per batch of steps: host launch gaps included), and the layer's bytes.
// Usage: bench_cuda_tq_cache [--contexts 4096,32768] [--chunk 4096] [--steps 200]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "kv/layer_cache.h"
#include "quant/tq_format.h"

using namespace tq;

namespace {

const LayerShape kShape{32, 8, 128};

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Result {
  double chunk_ms = 0, step_us = 0;
  size_t bytes = 0;
};

Result run(bool turbo, int64_t ctx, int64_t chunk, int steps) {
  auto be = make_cuda_backend();
  std::unique_ptr<LayerCache> layer;
  if (turbo) {
    quant::TqFormat f;
    f.norm.corrected = true;
    layer = make_compressed_cache(*be, kShape, f, 0, 128);
    if (layer->format_id().rfind("device-compressed", 0) != 0)
      throw std::runtime_error("TurboQuant cache is not on the device");
  } else {
    layer = make_dense_cache(*be, kShape);
  }
  const size_t qn = size_t(chunk * kShape.n_head * kShape.head_dim);
  const size_t kn = size_t(chunk * kShape.n_head_kv * kShape.head_dim);
  auto hq = randn(qn, 1), hk = randn(kn, 2), hv = randn(kn, 3);
  for (float& x : hk) x *= 2.0f;
  DeviceBuffer q(be.get(), qn * 4), k(be.get(), kn * 4), v(be.get(), kn * 4), out(be.get(), qn * 4);
  be->upload(q.data(), hq.data(), qn * 4);
  be->upload(k.data(), hk.data(), kn * 4);
  be->upload(v.data(), hv.data(), kn * 4);
  const float scale = 1.0f / std::sqrt(128.0f);
  Result r;
  for (int64_t p = 0; p < ctx; p += chunk) {
    const int64_t m = std::min(chunk, ctx - p);
    cuda_synchronize();
    const double t0 = now_ms();
    layer->append_and_attend(*be, q.f32(), k.f32(), v.f32(), m, scale, out.f32());
    cuda_synchronize();
    r.chunk_ms = now_ms() - t0;  // the last chunk's
  }
  for (int i = 0; i < 5; ++i)
    layer->append_and_attend(*be, q.f32(), k.f32(), v.f32(), 1, scale, out.f32());
  cuda_synchronize();
  const double t0 = now_ms();
  for (int i = 0; i < steps; ++i)
    layer->append_and_attend(*be, q.f32(), k.f32(), v.f32(), 1, scale, out.f32());
  cuda_synchronize();
  r.step_us = (now_ms() - t0) * 1000.0 / steps;
  r.bytes = layer->bytes();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> contexts = {4096, 32768};
  int64_t chunk = 4096;
  int steps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--contexts") {
      contexts.clear();
      std::stringstream ss(argv[i + 1]);
      std::string item;
      while (std::getline(ss, item, ',')) contexts.push_back(std::atoll(item.c_str()));
    } else if (a == "--chunk") {
      chunk = std::atoll(argv[i + 1]);
    } else if (a == "--steps") {
      steps = std::atoi(argv[i + 1]);
    }
  }
  if (!cuda_available()) {
    std::printf("no CUDA device: %s\n", cuda_device_summary().c_str());
    return 1;
  }
  std::printf("# %s, one layer 32 q / 8 kv heads d=128, chunk %lld\n",
              cuda_device_summary().c_str(), (long long)chunk);
  std::printf("| cache | context | last chunk ms | decode step us | layer MiB |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  for (int64_t ctx : contexts)
    for (bool turbo : {false, true}) {
      try {
        Result r = run(turbo, ctx, chunk, steps);
        std::printf("| %s | %lld | %.3f | %.1f | %.1f |\n", turbo ? "turboquant4 r128" : "dense bf16",
                    (long long)ctx, r.chunk_ms, r.step_us, double(r.bytes) / (1 << 20));
      } catch (const std::exception& e) {
        std::printf("| %s | %lld | failed: %s | | |\n", turbo ? "turboquant4 r128" : "dense bf16",
                    (long long)ctx, e.what());
      }
      std::fflush(stdout);
    }
  return 0;
}
