// CUDA benchmark: the TurboQuant bulk encoder (tq_encode_rows / tq_encode_rows_bf16), Qwen3-8B kv
// heads (8, d=128), 4-bit with norm correction, printed as GB/s and % of the device's copy rate.
// Rows: a 4K prefill chunk of K from f32 with its exact-window rows (what a compressed layer's
// prefill writes), the same chunk codes only, and an 8K conversion slice from f32 (the old
// conversion's staging copy) and straight from a dense bf16 store [kv head][cap][d].
// Usage: bench_cuda_tq_encode [--row N] (only row N, from 0: e.g. for a profiler).
// TQ_ENCODE_KERNEL=warp runs the one-warp-per-vector baseline.
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/tq_cuda.h"
#include "quant/vector_codec.h"

using namespace tq;

namespace {

constexpr int kKv = 8, kD = 128;

struct Case {
  const void* x = nullptr;
  bool bf16 = false;
  int64_t T = 0, x_ts = 0, x_hs = 0;
  cuda::TqCodecDev codec;
  uint8_t* codes = nullptr;
  uint16_t* scales = nullptr;
  int64_t cap = 0;
  float* rot = nullptr;
  int64_t rot_cap = 0;
};

void run_case(void* p, void* stream) {
  const Case& c = *static_cast<const Case*>(p);
  if (c.bf16)
    cuda::tq_encode_rows_bf16(static_cast<const uint16_t*>(c.x), c.T, kKv, c.x_ts, c.x_hs, c.codec,
                              c.codes, c.scales, c.cap, 0, c.rot, c.rot_cap, 0, stream);
  else
    cuda::tq_encode_rows(static_cast<const float*>(c.x), c.T, kKv, c.x_ts, c.x_hs, c.codec,
                         c.codes, c.scales, c.cap, 0, c.rot, c.rot_cap, 0, stream);
}

}  // namespace

int main(int argc, char** argv) {
  const int only = argc == 3 && std::string(argv[1]) == "--row" ? std::atoi(argv[2]) : -1;
  if (!cuda_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  const char* kernel = std::getenv("TQ_ENCODE_KERNEL");
  auto be = make_cuda_backend();
  quant::TqFormat f;
  f.head_dim = kD;
  f.norm.corrected = true;
  quant::VectorCodec codec(f.key_config());
  const int64_t T = 8192;  // the largest row; the chunk rows use the first 4096 tokens
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> hx(size_t(T * kKv * kD));
  for (float& x : hx) x = nd(g);
  std::vector<uint16_t> hb(hx.size());
  for (size_t i = 0; i < hx.size(); ++i) hb[i] = uint16_t(std::bit_cast<uint32_t>(hx[i]) >> 16);
  DeviceBuffer x(be.get(), hx.size() * 4), xb(be.get(), hb.size() * 2);
  be->upload(x.data(), hx.data(), hx.size() * 4);
  be->upload(xb.data(), hb.data(), hb.size() * 2);
  DeviceBuffer codes(be.get(), size_t(kKv * T * kD / 2)), scales(be.get(), size_t(kKv * T * 2));
  DeviceBuffer rot(be.get(), size_t(kKv * (T + 128) * kD) * 4);
  const double copy = cuda::measure_copy_gbps(size_t(1) << 30);

  Case base;
  base.codec = cuda::make_tq_codec_dev(codec);
  base.codes = static_cast<uint8_t*>(codes.data());
  base.scales = static_cast<uint16_t*>(scales.data());
  base.cap = T;
  struct Row {
    const char* name;
    Case c;
    double bytes;
  };
  const double code_bytes = kD / 2 + 2;
  std::vector<Row> rows;
  Case c = base;  // a 4K chunk of K as the projection wrote it: [t][h][d] f32
  c.x = x.data(), c.T = 4096, c.x_ts = kKv * kD, c.x_hs = kD;
  c.rot = rot.f32(), c.rot_cap = 4096 + 128;
  rows.push_back({"chunk 4K, f32 + window rows", c, double(c.T * kKv) * (kD * 8 + code_bytes)});
  c.rot = nullptr;
  rows.push_back({"chunk 4K, f32, codes only", c, double(c.T * kKv) * (kD * 4 + code_bytes)});
  c.T = T;
  rows.push_back({"slice 8K, f32 staging", c, double(c.T * kKv) * (kD * 4 + code_bytes)});
  c.x = xb.data(), c.bf16 = true, c.x_ts = kD, c.x_hs = T * kD;  // a dense store [h][cap][d]
  rows.push_back({"slice 8K, bf16 store", c, double(c.T * kKv) * (kD * 2 + code_bytes)});

  std::printf("TurboQuant encode, %d kv heads, d=%d, 4-bit, kernel %s; copy %.0f GB/s\n", kKv, kD,
              kernel ? kernel : "group", copy);
  std::printf("| row | vectors | MB | us | GB/s | %% of copy |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (only >= 0 && size_t(only) != i) continue;
    Row& r = rows[i];
    const double ms = cuda::time_graph_ms(run_case, &r.c, 20, 15);
    const double gbps = r.bytes / (ms * 1e-3) / 1e9;
    std::printf("| %s | %lld | %.1f | %.1f | %.0f | %.0f%% |\n", r.name,
                (long long)(r.c.T * kKv), r.bytes / 1e6, ms * 1e3, gbps, 100.0 * gbps / copy);
  }
  return 0;
}
