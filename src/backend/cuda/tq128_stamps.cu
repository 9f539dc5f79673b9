// Probe TQ_DECODE_STAMPS=1 of the TurboQuant head_dim-128 decode (decode_tq128.cu), host side:
// the device buffer the last launch's blocks write their clock64 phase stamps to, and the
// one-line summary benchmarks print (phase medians and maxima), and with TQ_DECODE_STAMPS_CSV
// every block's timeline.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/tq128_merge.cuh"
#include "backend/cuda/tq_cuda.h"

namespace tq::cuda {
namespace {

struct Stamps {
  std::mutex mu;
  unsigned long long* buf = nullptr;
  size_t cap = 0, used = 0;  // blocks
};
Stamps& stamps() {
  static Stamps s;
  return s;
}

}  // namespace

namespace tq128 {

unsigned long long* stamp_buffer(size_t blocks) {
  Stamps& s = stamps();
  std::lock_guard<std::mutex> lock(s.mu);
  if (blocks > s.cap) {
    CUDA_CHECK(cudaDeviceSynchronize());
    if (s.buf) CUDA_CHECK(cudaFree(s.buf));
    CUDA_CHECK(cudaMalloc(&s.buf, blocks * 2 * kStamps * sizeof(unsigned long long)));
    s.cap = blocks;
  }
  s.used = blocks;
  return s.buf;
}

}  // namespace tq128

std::string tq128_stamp_report() {
  Stamps& st = stamps();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.buf || st.used == 0) return "no stamps (set TQ_DECODE_STAMPS=1)";
  CUDA_CHECK(cudaDeviceSynchronize());
  using tq128::kStamps;
  const size_t w = 2 * kStamps, n = st.used;
  std::vector<unsigned long long> h(n * w);
  CUDA_CHECK(cudaMemcpy(h.data(), st.buf, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
  auto clk = [&](size_t b, int k) { return double(h[b * w + k]); };
  auto gt = [&](size_t b, int k) { return double(h[b * w + kStamps + k]); };
  // Cycles per ns from all blocks' spans (the global timer ticks every 32 ns).
  double cyc = 0, ns = 0;
  for (size_t b = 0; b < n; ++b)
    cyc += clk(b, kStamps - 1) - clk(b, 0), ns += gt(b, kStamps - 1) - gt(b, 0);
  const double per_ns = ns > 0 ? cyc / ns : 1.98;
  auto spread = [&](auto f) {
    std::vector<double> d(n);
    for (size_t b = 0; b < n; ++b) d[b] = f(b);
    std::sort(d.begin(), d.end());
    return std::to_string(int(d.front())) + "/" + std::to_string(int(d[n / 2])) + "/" +
           std::to_string(int(d.back()));
  };
  std::string out = "stamps over " + std::to_string(n) + " blocks (" +
                    std::to_string(per_ns).substr(0, 4) + " cycles/ns); phase min/median/max (ns):";
  for (int k = 1; k < kStamps; ++k)
    out += " " + std::to_string(k) + ":" +
           spread([&](size_t b) { return (clk(b, k) - clk(b, k - 1)) / per_ns; });
  // The launch's timeline on the global timer, from the release: the earliest return from
  // griddepcontrol.wait among the blocks that waited there (>= 256 ns), else the first start.
  double rel = 1e300, first = 1e300;
  for (size_t b = 0; b < n; ++b) {
    first = std::min(first, gt(b, 0));
    if (gt(b, 2) - gt(b, 1) >= 256) rel = std::min(rel, gt(b, 2));
  }
  if (rel == 1e300) rel = first;
  out += "; timeline from the release, min/median/max (ns): start " +
         spread([&](size_t b) { return gt(b, 0) - rel; });
  const std::pair<int, const char*> marks[] = {{2, "wait"},    {3, "queries"}, {5, "loop"},
                                               {8, "partial"}, {9, "counter"}, {11, "end"}};
  for (const auto& [k, name] : marks)
    out += std::string(" ") + name + " " + spread([&](size_t b) { return gt(b, k) - rel; });
  // TQ_DECODE_STAMPS_CSV=path: each block's timeline (ns from the release), appended to path.
  if (const char* path = std::getenv("TQ_DECODE_STAMPS_CSV"); path && *path) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "block");
      for (int k = 0; k < kStamps; ++k) std::fprintf(f, ",t%d", k);
      std::fprintf(f, "\n");
      for (size_t b = 0; b < n; ++b) {
        std::fprintf(f, "%zu", b);
        for (int k = 0; k < kStamps; ++k) std::fprintf(f, ",%.0f", gt(b, k) - rel);
        std::fprintf(f, "\n");
      }
      std::fclose(f);
    }
  }
  return out;
}

}  // namespace tq::cuda
