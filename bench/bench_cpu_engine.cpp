// bench_cpu_engine: prefill tokens/s at 512 and 4096 tokens and decode tokens/s on the CPU
// backend, next to this machine's ceilings measured in the same run: sgemm GFLOP/s (prefill is
// GEMM-bound) and memory read GB/s (decode streams every weight once per token).
// Usage: bench_cpu_engine [model_dir ...] (default: models/micro-qwen3 and ../shared tiny-qwen3)
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"
#include "engine/generate.h"

using namespace tq;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Best of 5: sgemm 2048^3 split across the pool like the backend's linear layers.
double sgemm_gflops() {
  const int n = 2048;
  std::vector<float> a(size_t(n) * n, 0.5f), b(a), c(a);
  auto& pool = ThreadPool::global();
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t = Clock::now();
    pool.parallel_for(pool.size(), [&](int p) {
      int r0 = n * p / pool.size(), r1 = n * (p + 1) / pool.size();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, r1 - r0, n, 1.0f, a.data(), n,
                  b.data() + size_t(r0) * n, n, 0.0f, c.data() + r0, n);
    });
    best = std::max(best, 2.0 * n * n * n / seconds_since(t) / 1e9);
  }
  return best;
}

// Best of 3: reading a 256 MiB buffer across the pool.
double read_gbps() {
  std::vector<float> buf(size_t(64) << 20, 1.0f);
  auto& pool = ThreadPool::global();
  double best = 0;
  std::vector<double> sums(size_t(pool.size()));
  for (int rep = 0; rep < 3; ++rep) {
    auto t = Clock::now();
    pool.parallel_for(pool.size(), [&](int p) {
      size_t b = buf.size() * size_t(p) / size_t(pool.size());
      size_t e = buf.size() * size_t(p + 1) / size_t(pool.size());
      // 16 independent float lanes: the loop is bound by memory, not by an add chain.
      float acc[16] = {};
      for (size_t i = b; i + 16 <= e; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += buf[i + size_t(j)];
      double t = 0;
      for (float a : acc) t += a;
      sums[size_t(p)] = t;
    });
    best = std::max(best, double(buf.size() * 4) / seconds_since(t) / 1e9);
  }
  return best;
}

void bench_model(const std::string& dir, double gflops, double gbps) {
  auto be = make_cpu_backend();
  auto model = Model::load(dir, *be);
  const ModelConfig& c = model->config();
  // FLOPs per prompt token of the decoder layers' linear maps (the embedding lookup and the LM
  // head, which prefill runs once per chunk, and attention's quadratic part are excluded).
  double params = double(model->weight_bytes()) / 4.0;
  double table = double(c.vocab_size * c.hidden_size) * (c.tie_word_embeddings ? 1 : 2);
  double flops_per_token = 2.0 * (params - table);
  std::vector<int32_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(5 + (i * 7919) % (c.vocab_size - 5));
  std::printf("\n%s: %.1fM parameters, %.1f MiB of f32 weights\n", dir.c_str(), params / 1e6,
              double(model->weight_bytes()) / (1 << 20));
  std::printf("| phase | tokens | tokens/s | achieved | ceiling | of ceiling |\n|---|---|---|---|---|---|\n");
  for (int64_t n : {512, 4096}) {
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      KvCache cache = model->new_cache();
      std::vector<float> logits(size_t(c.vocab_size));
      auto t = Clock::now();
      for (int64_t p = 0; p < n; p += 512)
        model->forward(std::span(ids).subspan(size_t(p), size_t(std::min<int64_t>(512, n - p))),
                       cache, LogitsMode::Last, logits.data());
      best = std::min(best, seconds_since(t));
    }
    double tps = double(n) / best;
    double achieved = tps * flops_per_token / 1e9;
    std::printf("| prefill | %lld | %.0f | %.1f GFLOP/s | %.1f GFLOP/s | %.0f%% |\n", (long long)n, tps,
                achieved, gflops, 100 * achieved / gflops);
  }
  // Decode: 128 tokens after a 512-token prompt.
  GenerateOptions opt;
  opt.max_tokens = 129;
  opt.ignore_eos = true;
  opt.eos_ids = c.eos_token_ids;
  GenerateResult r = generate(*model, std::span(ids).first(512), opt);
  double tps = 128.0 / r.decode_seconds;
  double achieved = tps * double(model->weight_bytes()) / 1e9;
  std::printf("| decode | 128 after 512 | %.1f | %.2f GB/s of weights | %.2f GB/s | %.0f%% |\n", tps,
              achieved, gbps, 100 * achieved / gbps);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) dirs.push_back(argv[i]);
  if (dirs.empty()) {
    dirs.push_back("models/micro-qwen3");
    if (std::filesystem::exists("../shared/models/tiny-qwen3")) dirs.push_back("../shared/models/tiny-qwen3");
  }
  auto be = make_cpu_backend();  // sets OpenBLAS to one thread per call, as the engine runs it
  double gflops = sgemm_gflops(), gbps = read_gbps();
  std::printf("machine ceilings (same run): sgemm %.1f GFLOP/s, memory read %.2f GB/s, %d threads\n",
              gflops, gbps, ThreadPool::global().size());
  for (const auto& d : dirs) bench_model(d, gflops, gbps);
  return 0;
}
