// bench_kv_convert: dense -> TurboQuant conversion throughput (GB/s of dense f32 KV read) per
// width and slice size, and decode attention time on the converted layer vs the dense layer it
// came from, at 4K and 16K tokens (2 kv heads, 4 q heads, d = 128), all in one run. Decode
// times are the best of 7 steps; run on a quiet machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "kv/kv_convert.h"

using namespace tq;
using Clock = std::chrono::steady_clock;

int main() {
  auto be = make_cpu_backend();
  const LayerShape s{4, 2, 128};
  std::printf("| tokens | K/V bits | slice | convert ms | dense GB/s read | dense decode us | tq decode us | tq/dense |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int64_t n : {4096, 16384}) {
    std::mt19937 g(1);
    std::normal_distribution<float> nd;
    std::vector<float> k(size_t(n * s.n_head_kv * s.head_dim)), v(k.size());
    for (auto& x : k) x = nd(g);
    for (auto& x : v) x = nd(g);
    std::vector<float> q(size_t(s.n_head * s.head_dim)), out(q.size());
    for (auto& x : q) x = nd(g);
    for (int bits : {4, 8}) {
      for (int64_t slice : {int64_t(1024), int64_t(8192)}) {
        KvCache c;
        c.layers.push_back(make_dense_cache(*be, s));
        std::vector<float> scratch(size_t(n * s.n_head * s.head_dim));
        // Fill without attention cost: one append of n tokens (queries = zeros).
        std::vector<float> zq(scratch.size(), 0.0f);
        c.layers[0]->append_and_attend(*be, zq.data(), k.data(), v.data(), n, 0.088f, scratch.data());
        // Decode time: best of 7 single-token steps (the first ones pay for cache growth).
        auto decode_us = [&] {
          double best = 1e30;
          for (int r = 0; r < 7; ++r) {
            auto t = Clock::now();
            c.layers[0]->append_and_attend(*be, q.data(), k.data(), v.data(), 1, 0.088f, out.data());
            best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t).count());
          }
          return best;
        };
        double dense_us = decode_us();
        KvPolicy p;
        p.mode = KvPolicy::Mode::TurboQuant;
        p.format.key_width = p.format.value_width = quant::QuantWidth::bits(bits);
        p.slice_tokens = slice;
        size_t dense_bytes = size_t(c.n_tokens()) * dense_bytes_per_token(s);
        ConversionStats st = convert_cache(*be, c, s, p);
        double tq_us = decode_us();
        std::printf("| %lld | %d/%d | %lld | %.1f | %.2f | %.0f | %.0f | %.2fx |\n", (long long)n, bits,
                    bits, (long long)slice, st.seconds * 1e3, double(dense_bytes) / st.seconds / 1e9,
                    dense_us, tq_us, tq_us / dense_us);
      }
    }
  }
  return 0;
}
