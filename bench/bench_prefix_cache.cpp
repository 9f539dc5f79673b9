// bench_prefix_cache: a multi-turn conversation (a long shared start, then turns that each add
// a user message and the model's own 32-token answer) served by one EngineLoop without the
// prefix cache and one with it, in the same run: time to first token and tokens prefilled per
// turn, and one SSD-tier hit after a restart (a new engine on the same directory).
// Usage: bench_prefix_cache [model_dir] [start_tokens] [turns] [ram] ("ram": no SSD tier, no restart)
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine_loop.h"

using namespace tq;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int32_t> ids(int n, uint32_t seed) {
  std::vector<int32_t> out;
  uint32_t x = seed * 2654435761u + 7;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(int32_t(100 + (x >> 8) % 5000));
  }
  return out;
}

struct Turn {
  double ttft_s = 0;
  int64_t prefilled = 0, cached = 0;
  std::vector<int32_t> answer;
};

std::unique_ptr<EngineLoop> make_engine(const std::string& dir, std::shared_ptr<PrefixCache> pc) {
  auto backend = make_cpu_backend();
  auto model = Model::load(dir, *backend);
  EngineConfig cfg;
  cfg.sched.prefill_budget = 256;
  cfg.ctx_size = 16384;
  cfg.prefix_cache = std::move(pc);
  return std::make_unique<EngineLoop>(std::move(model), cfg, std::move(backend));
}

std::shared_ptr<PrefixCache> make_cache(const std::string& model_dir, const std::string& disk) {
  PrefixCacheConfig c;
  c.dir = disk;
  // The identity only has to be the same for both engines of this run.
  return PrefixCache::create(c, "bench " + model_dir);
}

Turn run_turn(EngineLoop& e, const std::vector<int32_t>& prompt) {
  const int64_t before = e.stats().prompt_tokens_total;
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = 32;
  r.ignore_eos = true;
  Turn t;
  auto t0 = Clock::now();
  Submitted s = e.submit(r);
  if (s.status != SubmitStatus::Accepted) {
    std::fprintf(stderr, "not admitted: %s\n", s.error.c_str());
    return t;
  }
  std::vector<EngineEvent> evs;
  for (bool done = false; !done;) {
    if (!s.channel->wait(evs, std::chrono::milliseconds(120000))) break;
    for (const EngineEvent& ev : evs) {
      if (ev.kind == EngineEvent::Kind::Finished) {
        t.cached = ev.cached_tokens;
        done = true;
      } else {
        if (t.answer.empty()) t.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
        t.answer.push_back(ev.token);
      }
    }
  }
  e.wait_idle(std::chrono::milliseconds(5000));
  t.prefilled = e.stats().prompt_tokens_total - before;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "../shared/models/tiny-qwen3";
  int start = argc > 2 ? std::atoi(argv[2]) : 2048;
  int turns = argc > 3 ? std::atoi(argv[3]) : 6;
  const bool ram_only = argc > 4 && std::string(argv[4]) == "ram";
  namespace fs = std::filesystem;
  fs::path disk = fs::temp_directory_path() / ("tq_bench_prefix_" + std::to_string(::getpid()));
  fs::remove_all(disk);

  auto plain = make_engine(dir, nullptr);
  auto cached = make_engine(dir, make_cache(dir, ram_only ? "" : disk.string()));
  std::vector<int32_t> convo = ids(start, 1);
  std::printf("model %s, conversation start %d tokens, %d turns of +200 user tokens and a 32-token "
              "answer, prefill chunk 256, block 256\n\n",
              dir.c_str(), start, turns);
  std::printf("| turn | prompt tokens | no cache: TTFT s | prefilled | cache: TTFT s | prefilled | "
              "cached | TTFT ratio | same answer |\n|---|---|---|---|---|---|---|---|---|\n");
  double sum_plain = 0, sum_cached = 0;
  std::vector<int32_t> last_prompt;
  Turn last_plain;
  for (int k = 0; k < turns; ++k) {
    auto user = ids(200, uint32_t(100 + k));
    convo.insert(convo.end(), user.begin(), user.end());
    Turn a = run_turn(*plain, convo);
    Turn b = run_turn(*cached, convo);
    sum_plain += a.ttft_s;
    sum_cached += b.ttft_s;
    std::printf("| %d | %zu | %.3f | %lld | %.3f | %lld | %lld | %.2fx | %s |\n", k + 1, convo.size(),
                a.ttft_s, (long long)a.prefilled, b.ttft_s, (long long)b.prefilled,
                (long long)b.cached, a.ttft_s / std::max(b.ttft_s, 1e-9),
                a.answer == b.answer ? "yes" : "NO");
    last_prompt = convo;
    last_plain = a;
    convo.insert(convo.end(), a.answer.begin(), a.answer.end());
  }
  std::printf("\ntotal TTFT over %d turns: no cache %.3f s, cache %.3f s (%.2fx)\n", turns,
              sum_plain, sum_cached, sum_plain / std::max(sum_cached, 1e-9));
  if (ram_only) return 0;
  // Restart: a new engine and cache on the same directory, the last turn again.
  cached.reset();
  auto restarted = make_engine(dir, make_cache(dir, disk.string()));
  Turn r = run_turn(*restarted, last_prompt);
  std::printf("after a restart (SSD tier), last turn again: TTFT %.3f s vs %.3f s cold, %lld "
              "cached, same answer: %s\n",
              r.ttft_s, last_plain.ttft_s, (long long)r.cached,
              r.answer == last_plain.answer ? "yes" : "NO");
  fs::remove_all(disk);
  return 0;
}
