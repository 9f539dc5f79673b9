// What the EngineLoop tests of this folder share: token ids from a model's reference file (the
// needle documents among them) and a request's events drained into one outcome.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_loop.h"
#include "io/safetensors.h"

namespace tq::test {

// The I32 tensor `name` of a reference file; empty (and a test failure) when it is absent.
std::vector<int32_t> reference_ints(const SafetensorsFile& ref, const std::string& name);

// A needle document "needle_<L>_<J>" of a model fixture's reference/reference.safetensors: its
// ids, the prompt that stops right before the first answer (the model must recall the key from
// far back) and that answer. prompt and answer are empty (and the test has failed) when the
// document has no answer span.
struct Needle {
  std::vector<int32_t> doc, prompt, answer;
};
Needle read_needle(const std::filesystem::path& model_dir, const std::string& name);

// The guard tests' case: tiny-qwen3 (skipped when the shared fixtures are absent) and its
// needle_4096_0, whose prompt stops right before the first answer, so the value must be
// recalled from ~4000 tokens back.
class TinyNeedleTest : public ::testing::Test {
 protected:
  void SetUp() override;
  std::filesystem::path dir_;
  std::string model_;  // dir_ as a string, for --model
  std::vector<int32_t> prompt_, answer_, doc_;
};

// Everything one request produced, up to its Finished event.
struct EngineOutcome {
  std::vector<int32_t> ids;                // generated tokens
  std::vector<EngineEvent> prompt_events;  // prompt tokens (with prompt logprobs)
  FinishReason reason = FinishReason::Error;  // also when no Finished event came in time
  std::string error, code;
  bool retryable = false;
  int64_t completion_tokens = -1, cached = -1;
};

// Reads the channel until the request finishes; a test failure when an event takes longer than
// `timeout`.
EngineOutcome drain(RequestChannel& ch, std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace tq::test
