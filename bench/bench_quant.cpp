// bench_quant: TurboQuant codec throughput (encode GB/s per width) and decode attention on the
// compressed cache vs a dense fp32 attention baseline with the same loop structure, same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "quant/compressed_attention.h"
#include "quant/portable_random.h"
#include "quant/vec_ops.h"
#include "quant/vector_codec.h"

using namespace tq::quant;

namespace {

// Median of 5 timings, each repeating fn until >= 50 ms, in seconds per call.
double time_call(const std::function<void()>& fn) {
  fn();  // warm caches and the pool
  std::vector<double> per_call;
  for (int rep = 0; rep < 5; ++rep) {
    int n = 0;
    auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      fn();
      ++n;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < 0.05);
    per_call.push_back(el / n);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[2];
}

// ---- Dense fp32 baseline: the compressed path's structure without the decode step -----------
using tq::quant::simd::accumulate_rows;
using tq::quant::simd::axpy;
using tq::quant::simd::dot;

// One decode step: q [n_q_head][d], k/v [n_kv_head][n_token][d]; split-K over the pool exactly as
// CompressedAttention does (items = kv heads x splits, tiles of 32, one rescale per tile).
void dense_attention(const float* q, const float* k, const float* v, int64_t n_token, int n_q_head,
                     int n_kv_head, int d, float* out, tq::ThreadPool& pool) {
  const int G = n_q_head / n_kv_head, T = 32;
  const float scale = 1.0f / std::sqrt(float(d));
  const int threads = pool.size();
  int64_t n_split = n_kv_head < 2 * threads
                        ? std::clamp<int64_t>((2 * threads + n_kv_head - 1) / n_kv_head, 1,
                                              std::max<int64_t>(1, n_token / 512))
                        : 1;
  const int64_t n_item = n_kv_head * n_split;
  std::vector<float> state(size_t(n_item) * G * (d + 2));
  pool.parallel_for(int(n_item), [&](int item) {
    const int hk = int(item / n_split);
    const int64_t sp = item % n_split;
    const int64_t t0 = n_token * sp / n_split, t1 = n_token * (sp + 1) / n_split;
    float* m = &state[size_t(item) * G * (d + 2)];
    float* l = m + G;
    float* acc = l + G;
    std::vector<float> qs(size_t(G) * d), sc(size_t(G) * T);
    for (int g = 0; g < G; ++g) {
      for (int i = 0; i < d; ++i) qs[g * d + i] = q[(hk * G + g) * d + i] * scale;
      m[g] = -std::numeric_limits<float>::infinity();
      l[g] = 0.0f;
    }
    std::fill(acc, acc + size_t(G) * d, 0.0f);
    const float* kh = k + size_t(hk) * n_token * d;
    const float* vh = v + size_t(hk) * n_token * d;
    for (int64_t ts = t0; ts < t1; ts += T) {
      const int nt = int(std::min<int64_t>(T, t1 - ts));
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < nt; ++j) sc[g * T + j] = dot(&qs[g * d], kh + (ts + j) * d, d);
      for (int g = 0; g < G; ++g) {
        float mt = m[g];
        for (int j = 0; j < nt; ++j) mt = std::max(mt, sc[g * T + j]);
        const float corr = std::exp(m[g] - mt);
        l[g] *= corr;
        if (corr != 1.0f)
          for (int i = 0; i < d; ++i) acc[g * d + i] *= corr;
        m[g] = mt;
        for (int j = 0; j < nt; ++j) {
          sc[g * T + j] = std::exp(sc[g * T + j] - mt);
          l[g] += sc[g * T + j];
        }
      }
      for (int g = 0; g < G; ++g) accumulate_rows(&sc[g * T], vh + ts * d, nt, d, &acc[g * d]);
    }
  });
  for (int h = 0; h < n_q_head; ++h) {
    const int hk = h / G, g = h % G;
    float mx = -std::numeric_limits<float>::infinity(), l = 0;
    std::vector<float> o(d, 0.0f);
    for (int64_t sp = 0; sp < n_split; ++sp) mx = std::max(mx, state[size_t(hk * n_split + sp) * G * (d + 2) + g]);
    for (int64_t sp = 0; sp < n_split; ++sp) {
      const float* s = &state[size_t(hk * n_split + sp) * G * (d + 2)];
      const float w = std::exp(s[g] - mx);
      l += w * s[G + g];
      axpy(w, s + 2 * G + size_t(g) * d, o.data(), d);
    }
    for (int i = 0; i < d; ++i) out[h * d + i] = o[i] / l;
  }
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  PortableRandom rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = float(rng.normal());
  return x;
}

void bench_encode() {
  const int d = 128;
  const int64_t n = 65536;  // 32 MiB of fp32: larger than the caches
  std::vector<float> x = random_floats(size_t(n) * d, 1);
  std::printf("\n## Encode (head_dim %d, %lld vectors, global pool of %d threads)\n\n", d,
              (long long)n, tq::ThreadPool::global().size());
  std::printf("| width | rotation | bytes/vec | ns/vector | GB/s fp32 in | GB/s bf16-equiv |\n");
  std::printf("|---|---|---|---|---|---|\n");
  struct Row {
    QuantWidth w;
    RotationKind r;
  };
  std::vector<Row> rows;
  for (int b = 1; b <= 8; ++b) rows.push_back({QuantWidth::bits(b), RotationKind::Hadamard});
  rows.push_back({QuantWidth::parse(2.5), RotationKind::Hadamard});
  rows.push_back({QuantWidth::parse(3.5), RotationKind::Hadamard});
  rows.push_back({QuantWidth::bits(4), RotationKind::Haar});
  for (const Row& row : rows) {
    VectorCodec c(CodecConfig{d, row.w, row.r, 7, {}});
    std::vector<uint8_t> out(size_t(n) * c.bytes_per_vector());
    double t = time_call([&] { c.encode_batch(x.data(), n, out.data()); });
    std::printf("| %s | %s | %zu | %.1f | %.2f | %.2f |\n", row.w.name().c_str(),
                rotation_name(row.r), c.bytes_per_vector(), t / n * 1e9,
                double(n) * d * 4 / t / 1e9, double(n) * d * 2 / t / 1e9);
  }
}

void bench_attention() {
  const int d = 128;
  tq::ThreadPool& pool = tq::ThreadPool::global();
  std::printf("\n## Decode attention (1 query position, head_dim %d, causal, %d threads)\n\n", d,
              pool.size());
  std::printf("| tokens | q/kv heads | bits K/V | dense fp32 us | compressed us | compressed/dense"
              " | dense GB/s | compressed GB/s | bytes ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t n_token : {4096, 16384}) {
    for (auto [nqh, nkv] : {std::pair{2, 1}, std::pair{4, 2}}) {
      std::vector<float> k = random_floats(size_t(nkv) * n_token * d, 2);
      std::vector<float> v = random_floats(k.size(), 3);
      std::vector<float> q = random_floats(size_t(nqh) * d, 4), out(q.size());
      const double dense_bytes = 2.0 * k.size() * 4;
      for (int bits : {4, 8}) {
        VectorCodec kc(CodecConfig{d, QuantWidth::bits(bits), RotationKind::Hadamard, 1, {}});
        VectorCodec vc(CodecConfig{d, QuantWidth::bits(bits), RotationKind::Hadamard, 2, {}});
        std::vector<uint8_t> kq(size_t(nkv) * n_token * kc.bytes_per_vector());
        std::vector<uint8_t> vq(size_t(nkv) * n_token * vc.bytes_per_vector());
        kc.encode_batch(k.data(), nkv * n_token, kq.data());
        vc.encode_batch(v.data(), nkv * n_token, vq.data());
        KvBlock blk;
        blk.k = kq.data();
        blk.v = vq.data();
        blk.n_token = n_token;
        AttentionParams p;
        p.n_q_head = nqh;
        p.n_kv_head = nkv;
        const int64_t pos = n_token - 1;
        CompressedAttention att(kc, vc);
        // Dense timed right next to compressed: on a shared, noisy VM only adjacent timings
        // give a meaningful ratio.
        double t_dense = time_call([&] {
          dense_attention(q.data(), k.data(), v.data(), n_token, nqh, nkv, d, out.data(), pool);
        });
        double t_tq =
            time_call([&] { att.run(q.data(), &pos, 1, &blk, 1, p, out.data(), &pool); });
        const double tq_bytes = double(kq.size() + vq.size());
        std::printf("| %lld | %d/%d | %d/%d | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2fx |\n",
                    (long long)n_token, nqh, nkv, bits, bits, t_dense * 1e6, t_tq * 1e6,
                    t_tq / t_dense, dense_bytes / t_dense / 1e9, tq_bytes / t_tq / 1e9,
                    dense_bytes / tq_bytes);
      }
    }
  }
}

}  // namespace

// Usage: bench_quant [encode|attention] (default both).
int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  std::printf("# bench_quant: TurboQuant codec (CPU reference)\n");
  if (only.empty() || only == "encode") bench_encode();
  if (only.empty() || only == "attention") bench_attention();
  return 0;
}
