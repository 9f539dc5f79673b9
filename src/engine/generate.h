// generate() and score(): the single-sequence engine paths behind the CLI and the golden tests.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "kv/kv_convert.h"
#include "kv/kv_policy.h"
#include "model/model.h"
#include "engine/seq_guard.h"

namespace tq {

// One prefill chunk: where it started, how long, what the guard saw before it ran.
struct ChunkRecord {
  int64_t begin = 0, n = 0;
  double seconds = 0;
  uint64_t used = 0, projected = 0;  // guard's view before the chunk (0 without a guard)
};

struct GenerateOptions {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  // EOS ids are masked (logit -inf) at every step, as transformers' min_new_tokens does.
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
  int64_t prefill_chunk = 512;
  bool progress = false;  // prefill progress on a terminal
  // TurboQuant: converted after the prompt ("ordinary"), or at policy.convert_at mid-prefill.
  KvPolicy kv;
  GuardOptions guard;
  // Prefill chunks are cut at this token too, and suffix_seconds times the prompt from here
  // (the validation runner's common boundary; 0: none).
  int64_t suffix_from = 0;
};

struct GenerateResult {
  std::vector<int32_t> ids;           // generated ids (an EOS that stopped generation included)
  std::string finish_reason;          // "stop" (EOS) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  size_t kv_bytes = 0;                // KV cache bytes at the end
  size_t kv_peak_bytes = 0;           // the most the KV cache held at any point
  bool converted = false;
  ConversionStats conversion;
  std::string conversion_trigger;     // "forced", "organic", "after_prefill" ("" if none)
  double suffix_seconds = 0;          // prefill time from suffix_from to the end (incl. conversion)
  std::vector<ChunkRecord> chunks;
  GuardReport guard;
  RequestError error;                 // set when the request failed (finish_reason "error")
};

// Prefills `prompt` in chunks, then samples one token per step. on_token sees each new id
// as it is produced; returning false stops generation (finish_reason "stop").
GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token = {});

struct ScoreResult {
  std::vector<float> nll;       // [n-1]: -log p(ids[t+1] | ids[..t])
  std::vector<int32_t> argmax;  // [n]: argmax of the logits at every position
  std::vector<float> last_logits;  // [vocab]
  double mean_nll = 0;
  double seconds = 0;
  size_t kv_bytes = 0;       // at the end
  size_t kv_peak_bytes = 0;  // the most the KV cache held at any point
  bool converted = false;
  ConversionStats conversion;
  std::string conversion_trigger;  // "forced", "organic", "from_start" ("" if none)
  double suffix_seconds = 0;
  std::vector<ChunkRecord> chunks;
  GuardReport guard;
  RequestError error;  // set when the guard stopped scoring (the vectors then stop short)
};

struct ScoreOptions {
  int64_t chunk = 512;
  bool progress = false;
  // TurboQuant: with convert_at 0 every position attends to a compressed cache (the cache is
  // compressed from the first token); with convert_at N the first N tokens are scored on the
  // dense cache, which is then converted (mid-prefill) and the rest scored on it.
  KvPolicy kv;
  // Sees the full logits row [vocab] of every position from logits_from on (e.g. for KL
  // divergence against a baseline); the other rows stay on the backend (NLL and argmax come
  // from its LogitsStats).
  std::function<void(int64_t position, const float* row)> on_logits;
  int64_t logits_from = 0;
  // With the guard enabled, a TurboQuant policy without convert_at prefills dense (as serving
  // does) and converts only on the guard's organic trigger.
  GuardOptions guard;
  int64_t suffix_from = 0;  // as in GenerateOptions
};

// Teacher-forced scoring of ids (n >= 1) in prefill chunks.
ScoreResult score(Model& model, std::span<const int32_t> ids, const ScoreOptions& opt);
inline ScoreResult score(Model& model, std::span<const int32_t> ids, int64_t chunk = 512) {
  ScoreOptions o;
  o.chunk = chunk;
  return score(model, ids, o);
}

}  // namespace tq
