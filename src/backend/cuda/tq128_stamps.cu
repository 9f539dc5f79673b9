// Probe TQ_DECODE_STAMPS=1 of the TurboQuant head_dim-128 decode (decode_tq128.cu), host side:
// the device buffer the last launch's blocks write their clock64 phase stamps to, and the
// one-line summary benchmarks print (phase medians and maxima).
#include <algorithm>
#include <mutex>
#include <string>
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
    CUDA_CHECK(cudaMalloc(&s.buf, blocks * (kStamps + 2) * sizeof(unsigned long long)));
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
  const size_t w = kStamps + 2;
  std::vector<unsigned long long> h(st.used * w);
  CUDA_CHECK(cudaMemcpy(h.data(), st.buf, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
  // Cycles per ns from all blocks' spans (the global timer is coarse; the sum averages it out).
  double cyc = 0, ns = 0;
  unsigned long long g0 = ~0ull, g1 = 0, gmax0 = 0;
  for (size_t b = 0; b < st.used; ++b) {
    const unsigned long long* s = &h[b * w];
    cyc += double(s[kStamps - 1] - s[0]);
    ns += double(s[kStamps + 1] - s[kStamps]);
    g0 = std::min(g0, s[kStamps]), gmax0 = std::max(gmax0, s[kStamps]);
    g1 = std::max(g1, s[kStamps + 1]);
  }
  const double per_ns = ns > 0 ? cyc / ns : 1.98;
  std::string out = "stamps over " + std::to_string(st.used) + " blocks (" +
                    std::to_string(per_ns).substr(0, 4) + " cycles/ns): start skew " +
                    std::to_string(int(gmax0 - g0)) + " ns, first start to last end " +
                    std::to_string(int(g1 - g0)) + " ns; phase medians / max (ns):";
  for (int k = 1; k < kStamps; ++k) {
    std::vector<double> d(st.used);
    for (size_t b = 0; b < st.used; ++b)
      d[b] = double(h[b * w + k] - h[b * w + k - 1]) / per_ns;
    std::sort(d.begin(), d.end());
    out += " " + std::to_string(k) + ":" + std::to_string(int(d[d.size() / 2])) + "/" +
           std::to_string(int(d.back()));
  }
  return out;
}

}  // namespace tq::cuda
