// bench_engine: batch decode on the CPU or the CUDA backend through Model::forward_batch (the
// step EngineLoop runs): N sequences prefilled to L tokens each (dense, or converted to
// TurboQuant after the prompt as the server does), then M decode steps of all N together.
// Prints prefill tokens/s and aggregate decode tokens/s. --mid-prefill instead measures one
// sequence's prefill of L tokens with a forced conversion at --convert-at (generate()'s path,
// KvPolicy.convert_at) next to a dense prefill of the same prompt in the same run; --bracket runs
// the dense prefill again after it and prints that time last (a GPU slowing down over the run,
// e.g. with its temperature, shows as the two dense times apart). Its row: device, context,
// conversion token, dense / TurboQuant prefill s, conversion s and share, slices, KV MiB of each,
// the suffix (tokens from --convert-at on) of each in s (TurboQuant's with its conversion) and
// TurboQuant's suffix without the conversion against dense's (the compressed-prefix cost).
//
// Usage: bench_engine --model DIR [--device cpu|cuda] [--batch N] [--context L] [--tokens M]
//                     [--kv dense|turboquant] [--chunk C]
//                     [--mid-prefill [--convert-at T] [--bracket]]
// --batch and --kv take comma lists (e.g. --batch 1,8,32 --kv dense,turboquant): every pair runs
// in one process on one loaded model, a table row each. --copy-prefill prefills sequence 0 only
// and gives the others a copy of its cache (the prefix cache's save_kv_block / load_kv_block):
// decode cost depends on the lengths, not the contents; prefill tok/s is then sequence 0's.
// Decode steps take greedy LogitsTop summaries (sampling on the backend, as EngineLoop);
// TQ_FULL_LOGITS=1 downloads the full rows instead (a same-run baseline).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "engine/device_support.h"
#include "engine/generate.h"
#include "kv/block_codec.h"
#include "kv/kv_convert.h"

using namespace tq;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model, device = "cpu", kv = "dense";  // kv: one format (a run)
  int64_t batch = 1, context = 512, tokens = 32, chunk = 2048, convert_at = 0;
  bool mid_prefill = false;
  bool bracket = false;  // --mid-prefill: dense again after the TurboQuant run
  bool copy_prefill = false;
  std::vector<std::string> kvs;  // --kv list
  std::vector<int64_t> batches;  // --batch list
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(',', b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_engine: %s\nusage: bench_engine --model DIR [--device cpu|cuda] [--batch N] "
               "[--context L] [--tokens M] [--kv dense|turboquant] [--chunk C] [--copy-prefill] "
               "[--mid-prefill [--convert-at T] [--bracket]]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + f).c_str());
      return argv[++i];
    };
    auto to_number = [&](const std::string& v) -> int64_t {
      char* end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0) usage((f + ": not a non-negative integer: " + v).c_str());
      return n;
    };
    auto number = [&] { return to_number(value()); };
    if (f == "--model") a.model = value();
    else if (f == "--device") a.device = value();
    else if (f == "--kv") a.kvs = split(value());
    else if (f == "--batch") for (const auto& b : split(value())) a.batches.push_back(to_number(b));
    else if (f == "--context") a.context = number();
    else if (f == "--tokens") a.tokens = number();
    else if (f == "--chunk") a.chunk = number();
    else if (f == "--convert-at") a.convert_at = number();
    else if (f == "--mid-prefill") a.mid_prefill = true;
    else if (f == "--bracket") a.bracket = true;
    else if (f == "--copy-prefill") a.copy_prefill = true;
    else usage(("unknown argument " + f).c_str());
  }
  if (a.model.empty()) usage("--model is required");
  if (a.device != "cpu" && a.device != "cuda") usage("--device must be cpu or cuda");
  if (a.kvs.empty()) a.kvs = {"dense"};
  if (a.batches.empty()) a.batches = {1};
  for (const auto& kv : a.kvs)
    if (kv != "dense" && kv != "turboquant") usage("--kv must be dense or turboquant");
  for (int64_t b : a.batches)
    if (b < 1) usage("--batch must be >= 1");
  if (a.context < 1 || a.chunk < 1) usage("--context and --chunk must be >= 1");
  if (a.mid_prefill && a.convert_at == 0) a.convert_at = a.context / 2;
  if (a.mid_prefill && a.convert_at >= a.context) usage("--convert-at must be below --context");
  if (a.bracket && !a.mid_prefill) usage("--bracket needs --mid-prefill");
  return a;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// 4-bit K/V TurboQuant (the product's default widths) on every full-attention layer.
KvPolicy policy_for(const std::string& kv, const ModelConfig& mc, int64_t convert_at) {
  KvPolicy p;
  if (kv == "dense") return p;
  p.mode = KvPolicy::Mode::TurboQuant;
  p.format.head_dim = int(mc.head_dim);
  p.convert_at = convert_at;
  return p;
}

// Token ids of sequence s: a fixed pseudo-random stream (no special ids below 5).
std::vector<int32_t> prompt_of(int64_t s, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(s + 1);
  for (auto& id : ids) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    id = int32_t(5 + x % uint64_t(vocab - 5));
  }
  return ids;
}

int batch_decode(const Args& a, Model& model) {
  const ModelConfig& mc = model.config();
  const KvPolicy policy = policy_for(a.kv, mc, 0);
  check_backend_kv(model.backend(), policy, mc);
  const LayerShape shape{mc.n_head, mc.n_head_kv, mc.head_dim};
  std::vector<KvCache> caches;
  std::vector<float> logits(size_t(a.batch * mc.vocab_size));
  double prefill_s = 0, convert_s = 0;
  int64_t prefilled = 0;
  std::vector<uint8_t> first;  // --copy-prefill: sequence 0's dense cache
  for (int64_t s = 0; s < a.batch; ++s) {
    caches.push_back(model.new_cache());
    auto t0 = Clock::now();
    if (a.copy_prefill && s > 0) {
      if (!load_kv_block(model.backend(), caches.back(), 0, a.context, first))
        fail("--copy-prefill: the cache copy did not load");
    } else {
      const std::vector<int32_t> ids = prompt_of(s, a.context, mc.vocab_size);
      for (int64_t p = 0; p < a.context; p += a.chunk) {
        const int64_t m = std::min(a.chunk, a.context - p);
        model.forward(std::span<const int32_t>(ids.data() + p, size_t(m)), caches.back(),
                      LogitsMode::Last, logits.data() + s * mc.vocab_size);
      }
      prefill_s += since(t0);
      prefilled += a.context;
      if (a.copy_prefill && a.batch > 1) first = save_kv_block(model.backend(), caches.back(), 0);
    }
    if (policy.turboquant()) {
      auto t1 = Clock::now();
      convert_cache(model.backend(), caches.back(), shape, policy);
      convert_s += since(t1);
    }
  }
  uint64_t kv_bytes = 0;
  for (const auto& c : caches) kv_bytes += c.bytes();
  // Decode: every step feeds each sequence one id (a fixed stream: the host's sampling is not
  // measured) and takes what a greedy EngineLoop step takes: each row's LogitsTop summary
  // (sampling on the backend), or with TQ_FULL_LOGITS=1 (a same-run baseline) the full rows.
  static const bool full_logits = [] {
    const char* e = std::getenv("TQ_FULL_LOGITS");
    return e && std::string(e) == "1";
  }();
  std::vector<int32_t> next(size_t(a.batch));
  std::vector<Model::SeqStep> steps(size_t(a.batch));
  std::vector<LogitsTop> tops(size_t(a.batch));
  auto step = [&](int64_t k) {
    for (int64_t s = 0; s < a.batch; ++s) {
      next[size_t(s)] = int32_t(5 + (s * 7919 + k * 104729) % (mc.vocab_size - 5));
      Model::SeqStep& st = steps[size_t(s)];
      st = {std::span<const int32_t>(&next[size_t(s)], 1), &caches[size_t(s)], LogitsMode::Last,
            logits.data() + s * mc.vocab_size};
      if (!full_logits && mc.vocab_size >= kLogitsTop) {
        st.logits = nullptr;
        st.top = &tops[size_t(s)];
      }
    }
    model.forward_batch(steps);
  };
  if (a.tokens > 1) step(0);  // warm-up (workspaces, plans)
  auto t2 = Clock::now();
  const int64_t timed = std::max<int64_t>(a.tokens - 1, 1);
  for (int64_t k = 0; k < timed; ++k) step(k + 1);
  const double decode_s = since(t2);
  const double total_prefill = double(prefilled);
  std::printf("| %s | %s | %lld | %lld | %.0f | %.2f | %.1f | %.1f | %.0f | %.0f |\n",
              a.device.c_str(), a.kv.c_str(), (long long)a.batch, (long long)a.context,
              total_prefill / prefill_s, convert_s, decode_s * 1e3 / double(timed),
              double(kv_bytes) / (1 << 20), double(a.batch * timed) / decode_s,
              double(model.backend().allocated_bytes()) / (1 << 20));
  return 0;
}

// One sequence of a.context tokens: dense prefill, then the same prompt with a forced
// conversion at a.convert_at (TurboQuant 4-bit), through generate() (one new token each).
int mid_prefill(const Args& a, Model& model) {
  const ModelConfig& mc = model.config();
  const std::vector<int32_t> ids = prompt_of(0, a.context, mc.vocab_size);
  GenerateOptions dense;
  dense.max_tokens = 1;
  dense.prefill_chunk = a.chunk;
  dense.suffix_from = a.convert_at;  // both runs time the tokens after the conversion point
  GenerateOptions tqo = dense;
  tqo.kv = policy_for("turboquant", mc, a.convert_at);
  check_backend_kv(model.backend(), tqo.kv, mc);
  generate(model, std::span<const int32_t>(ids.data(), std::min<size_t>(ids.size(), 256)), dense);  // warm-up
  GenerateResult d = generate(model, ids, dense);
  GenerateResult t = generate(model, ids, tqo);
  if (!t.error.type.empty()) fail("mid-prefill run failed: {}", t.error.message);
  if (!t.converted || t.conversion_trigger != "forced") fail("the forced conversion did not run");
  const double after = a.bracket ? generate(model, ids, dense).prefill_seconds : 0.0;
  // The suffix on a compressed prefix (TurboQuant's suffix less its conversion) against dense's:
  // turboquant.md's "prefill with a compressed prefix within 5% of dense".
  const double on_prefix = t.suffix_seconds - t.conversion.seconds;
  std::printf("| %s | %lld | %lld | %.3f | %.3f | %.3f | %.1f%% | %lld | %.0f | %.0f | %.3f | %.3f | %+.1f%% |",
              a.device.c_str(), (long long)a.context, (long long)t.conversion.at_token,
              d.prefill_seconds, t.prefill_seconds, t.conversion.seconds,
              100.0 * t.conversion.seconds / t.prefill_seconds, (long long)t.conversion.slices,
              double(d.kv_bytes) / (1 << 20), double(t.kv_bytes) / (1 << 20), d.suffix_seconds,
              t.suffix_seconds, 100.0 * (on_prefix / d.suffix_seconds - 1.0));
  if (a.bracket) std::printf(" %.3f |", after);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    std::unique_ptr<Backend> be;
    if (a.device == "cuda") {
      if (!cuda_available()) fail("--device cuda: {}", cuda_device_summary());
      be = make_cuda_backend();
    } else {
      be = make_cpu_backend();
    }
    auto t0 = Clock::now();
    auto model = Model::load(a.model, *be);
    std::fprintf(stderr, "bench_engine: %s on %s (%s), loaded in %.1f s, weights %.0f MiB\n",
                 a.model.c_str(), a.device.c_str(),
                 a.device == "cuda" ? cuda_device_summary().c_str() : "host",
                 since(t0), double(model->weight_bytes()) / (1 << 20));
    {  // warm-up: first-call setup (GEMM plans, kernels, workspaces) is not measured
      KvCache warm = model->new_cache();
      std::vector<float> row(size_t(model->config().vocab_size));
      const std::vector<int32_t> ids = prompt_of(99, std::min<int64_t>(a.chunk, a.context), model->config().vocab_size);
      model->forward(ids, warm, LogitsMode::Last, row.data());
      model->forward(std::span<const int32_t>(ids.data(), 1), warm, LogitsMode::Last, row.data());
    }
    if (a.mid_prefill) {
      std::printf("| device | context | convert at | dense prefill s | tq prefill s | conversion s | "
                  "conversion share | slices | dense KV MiB | tq KV MiB | dense suffix s | "
                  "tq suffix s | tq suffix less conversion vs dense |\n"
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
      return mid_prefill(a, *model);
    }
    std::printf("| device | kv | batch | context | prefill tok/s | convert s | ms/step | KV MiB | "
                "decode tok/s | backend MiB |\n|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (const auto& kv : a.kvs)
      for (int64_t b : a.batches) {
        Args one = a;
        one.kv = kv;
        one.batch = b;
        try {
          batch_decode(one, *model);
        } catch (const std::exception& e) {  // one configuration failed: the others still run
          std::fprintf(stderr, "bench_engine: %s batch %lld: %s\n", kv.c_str(), (long long)b, e.what());
          std::printf("| %s | %s | %lld | %lld | error: %s |\n", a.device.c_str(), kv.c_str(),
                      (long long)b, (long long)a.context, e.what());
          rc = 1;
        }
        std::fflush(stdout);
      }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    std::printf("| %s | error: %s |\n", a.device.c_str(), e.what());
    return 1;
  }
}
