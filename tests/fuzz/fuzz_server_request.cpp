// Fuzz target: OpenAI request bodies (completions and chat) from arbitrary bytes. Every input
// either parses into a request whose fields are in range, or throws ApiError with status 400:
// never another exception, a crash or a hang.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_request.h"

namespace {
void check(const tq::GenerationRequest& r) {
  if (r.max_tokens && *r.max_tokens < 0) std::abort();
  if (!(r.sampling.temperature >= 0.0f) || !(r.sampling.top_p > 0.0f && r.sampling.top_p <= 1.0f))
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {false, true}) {
    try {
      check(chat ? tq::parse_chat_request(body) : tq::parse_completion_request(body));
    } catch (const tq::ApiError& e) {
      if (e.status != 400 && e.status != 413) std::abort();
    }
  }
  return 0;
}
