// EngineRequest, EngineEvent and RequestChannel: what the HTTP side submits to the engine loop,
// and the per-request mailbox through which the engine hands back tokens and the final outcome.
#pragma once
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace tq {

constexpr int32_t kMaxTopLogprobs = 20;

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids, each in [0, vocab)
  SamplingParams sampling;
  float presence_penalty = 0.0f;   // OpenAI semantics, over the generated tokens
  float frequency_penalty = 0.0f;
  int64_t max_tokens = 16;         // 0: only prefill (e.g. echo + logprobs scoring)
  std::vector<int32_t> stop_ids;   // ids that end generation like EOS (kept with ignore_eos)
  bool ignore_eos = false;         // EOS ids are masked: generation runs to max_tokens
  int32_t logprobs = -1;           // -1: none; k in [0, 20]: sampled token's logprob + top k
  bool prompt_logprobs = false;    // also report the prompt tokens' logprobs (echo)
};

enum class FinishReason : uint8_t { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
};

// One message from the engine. Token events carry no heap memory, so the steady decode path does
// not allocate per token.
struct EngineEvent {
  enum class Kind : uint8_t { Token, Finished };
  Kind kind = Kind::Token;
  // Token: a generated token, or with `prompt` a prompt token being reported for echo.
  bool prompt = false;
  int32_t token = -1;
  float logprob = std::numeric_limits<float>::quiet_NaN();  // NaN: not requested / not defined
  int32_t n_top = 0;
  std::array<TokenLogprob, kMaxTopLogprobs> top{};  // most likely first
  // Finished:
  FinishReason reason = FinishReason::Stop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from the prefix cache, not prefilled
  std::string error;  // reason == Error
  // reason == Error by the memory guard: memory_pressure, conversion_busy, conversion_failed
  // ("" for other errors); retryable: the same request may succeed later (503 + Retry-After).
  std::string error_code;
  bool retryable = false;
};

// A single-producer (engine) single-consumer (HTTP handler) event queue.
class RequestChannel {
 public:
  explicit RequestChannel(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  void push(const EngineEvent& e);
  // Waits up to `timeout` for events and moves all pending ones into `out` (cleared first; the
  // two buffers swap, so neither side reallocates once warm). False if none arrived.
  bool wait(std::vector<EngineEvent>& out, std::chrono::milliseconds timeout);

 private:
  uint64_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EngineEvent> pending_;
};

}  // namespace tq
