// generate() and score(): the single-sequence engine paths behind the CLI and the golden tests.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace tq {

struct GenerateOptions {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  // EOS ids are masked (logit -inf) at every step, as transformers' min_new_tokens does.
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
  int64_t prefill_chunk = 512;
  bool progress = false;  // prefill progress on a terminal
};

struct GenerateResult {
  std::vector<int32_t> ids;           // generated ids (an EOS that stopped generation included)
  std::string finish_reason;          // "stop" (EOS) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  size_t kv_bytes = 0;                // KV cache bytes at the end
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
  size_t kv_bytes = 0;
};

// Teacher-forced scoring of ids (n >= 1) in prefill chunks.
ScoreResult score(Model& model, std::span<const int32_t> ids, int64_t chunk = 512,
                  bool progress = false);

}  // namespace tq
