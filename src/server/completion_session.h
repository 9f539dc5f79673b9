// CompletionSession: one generation request between the HTTP handler and the engine. It submits
// the prompt, turns engine events into text (streaming detokenizer, stop strings held back and
// never leaked), logprobs and usage, and builds either the whole response or SSE chunks.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_loop.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace tq {

class CompletionSession {
 public:
  // prompt_text is what echo returns (the prompt's text, decoded when it came as ids).
  CompletionSession(EngineLoop& engine, const Tokenizer& tok, GenerationRequest req,
                    std::vector<int32_t> prompt, std::string prompt_text, ResponseMeta meta);
  ~CompletionSession();  // cancels the engine request if it is still running

  // Submits to the engine. Throws ApiError: 503 when the queue is full or the server is
  // shutting down, 400 when the engine rejects the request.
  void start(int64_t max_tokens);

  // Non-streaming: waits for the end and returns the response object. Returns null JSON when
  // client_gone() said the client left (the request is cancelled). Throws ApiError (500) when
  // the engine failed.
  nlohmann::ordered_json run_to_end(const std::function<bool()>& client_gone);

  // Streaming, before any byte is sent: waits for the engine's first generated token (or the
  // end), so a request the engine turns away before producing anything (the memory guard, a
  // busy conversion lane, a failed conversion) gets a plain HTTP error instead of a stream.
  // Throws that ApiError; returns false when the client left meanwhile (cancelled).
  bool await_first_token(const std::function<bool()>& client_gone);
  // Whether streaming should wait for await_first_token (the engine may turn requests away
  // mid-prefill: memory guard or TurboQuant conversions).
  bool engine_may_reject() const;

  // Streaming: waits briefly for events and appends the SSE events they produce to `out`.
  // Returns false once the stream is complete (ending with "data: [DONE]").
  bool stream_next(std::string& out, const std::function<bool()>& client_gone);

  // Stops generation now (client gone, write failed).
  void cancel();

  // For the access log and metrics.
  const std::string& finish_reason() const { return finish_reason_; }
  bool client_cancelled() const { return client_cancelled_; }
  bool failed() const { return !error_.empty(); }
  int64_t prompt_tokens() const { return int64_t(prompt_.size()); }
  int64_t completion_tokens() const { return n_completion_; }

 private:
  // Consumes one batch of events; `chunk` (streaming) receives the SSE events they produce.
  void consume(std::string* chunk);
  void on_token(const EngineEvent& e, std::string* chunk);
  void on_finished(const EngineEvent& e, std::string* chunk);
  void emit_echo(std::string* chunk);
  void emit_text(std::string* chunk, const std::string& text);
  void emit_final(std::string* chunk);
  // The engine's error as an HTTP error: 503 (retryable guard outcomes), 500 otherwise.
  ApiError engine_error() const;

  EngineLoop& engine_;
  const Tokenizer& tok_;
  GenerationRequest req_;
  std::vector<int32_t> prompt_;
  std::string prompt_text_;
  ResponseMeta meta_;
  bool chat_;

  std::shared_ptr<RequestChannel> channel_;
  std::vector<EngineEvent> events_;
  std::vector<EngineEvent> pending_;        // events await_first_token read, not yet consumed
  StreamDetokenizer detok_;
  StopMatcher stop_;
  std::string text_;                        // completion text released so far (no stop string)
  std::vector<LogprobEntry> prompt_lp_;     // echo + logprobs
  std::vector<LogprobEntry> lp_;            // generated tokens (logprobs requested)
  size_t lp_streamed_ = 0;                  // entries already sent in chunks
  size_t text_offset_ = 0;                  // completions text_offset of the next chunk
  int64_t n_completion_ = 0;
  int64_t n_cached_ = 0;                    // prompt tokens the prefix cache restored
  bool started_ = false;       // submitted and not yet finished
  bool done_ = false;          // outcome known
  bool role_sent_ = false;     // chat streaming: the first (role) chunk is out
  bool echo_sent_ = false;
  bool final_sent_ = false;
  bool client_cancelled_ = false;
  std::string finish_reason_;
  std::string error_;
  std::string error_code_;  // the engine's: memory_pressure, conversion_busy, conversion_failed
  bool retryable_ = false;
};

}  // namespace tq
