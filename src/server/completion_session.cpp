// CompletionSession implementation: engine events -> text, logprobs, chunks and responses.
#include "server/completion_session.h"

#include <chrono>

namespace tq {

using nlohmann::ordered_json;

CompletionSession::CompletionSession(EngineLoop& engine, const Tokenizer& tok, GenerationRequest req,
                                     std::vector<int32_t> prompt, std::string prompt_text,
                                     ResponseMeta meta)
    : engine_(engine), tok_(tok), req_(std::move(req)), prompt_(std::move(prompt)),
      prompt_text_(std::move(prompt_text)), meta_(std::move(meta)),
      chat_(req_.endpoint == Endpoint::Chat), detok_(tok, req_.skip_special_tokens),
      stop_(req_.stop) {}

CompletionSession::~CompletionSession() { cancel(); }

void CompletionSession::cancel() {
  if (started_) engine_.cancel(channel_->id());
  started_ = false;
  done_ = true;
}

void CompletionSession::start(int64_t max_tokens) {
  EngineRequest er;
  er.prompt = prompt_;
  er.sampling = req_.sampling;
  er.presence_penalty = req_.presence_penalty;
  er.frequency_penalty = req_.frequency_penalty;
  er.max_tokens = max_tokens;
  er.stop_ids = req_.stop_token_ids;
  er.ignore_eos = req_.ignore_eos;
  er.logprobs = req_.logprobs;
  er.prompt_logprobs = req_.echo && req_.logprobs >= 0;
  Submitted s = engine_.submit(std::move(er));
  switch (s.status) {
    case SubmitStatus::Accepted: break;
    case SubmitStatus::Busy:
      throw ApiError(503, "The server is busy: the request queue is full. Please retry shortly.", "",
                     "server_busy");
    case SubmitStatus::ShuttingDown:
      throw ApiError(503, "The server is shutting down.", "", "shutting_down");
    case SubmitStatus::Invalid:
      throw ApiError(400, s.error, chat_ ? "messages" : "prompt", s.code);
    case SubmitStatus::NoMemory:
      throw ApiError(503, s.error + ". Please retry shortly.", "", s.code, s.code);
  }
  channel_ = std::move(s.channel);
  started_ = true;
}

void CompletionSession::consume(std::string* chunk) {
  for (const EngineEvent& e : events_) {
    if (done_) break;  // e.g. a stop string ended it: later events are leftovers
    if (e.kind == EngineEvent::Kind::Finished) {
      on_finished(e, chunk);
    } else if (e.prompt) {
      prompt_lp_.push_back(LogprobEntry::from(e));
    } else {
      on_token(e, chunk);
    }
  }
}

void CompletionSession::on_token(const EngineEvent& e, std::string* chunk) {
  if (req_.echo && !echo_sent_) emit_echo(chunk);
  ++n_completion_;
  if (req_.logprobs >= 0) lp_.push_back(LogprobEntry::from(e));
  std::string out = stop_.push(detok_.push(e.token));
  if (stop_.stopped()) {
    cancel();  // frees the sequence now; the rest of the text is never produced
    finish_reason_ = "stop";
  }
  emit_text(chunk, out);
  if (done_) emit_final(chunk);
}

void CompletionSession::on_finished(const EngineEvent& e, std::string* chunk) {
  if (req_.echo && !echo_sent_) emit_echo(chunk);
  started_ = false;
  done_ = true;
  n_cached_ = e.cached_tokens;
  switch (e.reason) {
    case FinishReason::Error:
      error_ = e.error;
      error_code_ = e.error_code;
      retryable_ = e.retryable;
      break;
    case FinishReason::Cancelled: finish_reason_ = "abort"; break;
    case FinishReason::Stop:
    case FinishReason::Length: {
      std::string tail = stop_.push(detok_.finish());
      if (!stop_.stopped()) tail += stop_.flush();
      finish_reason_ = stop_.stopped() ? "stop" : finish_reason_name(e.reason);
      emit_text(chunk, tail);
      break;
    }
  }
  emit_final(chunk);
}

void CompletionSession::emit_echo(std::string* chunk) {
  echo_sent_ = true;
  if (!chunk) return;  // non-streaming: the prompt is prepended when the response is built
  ordered_json lp = nullptr;
  if (req_.logprobs >= 0) lp = completion_logprobs_json(tok_, prompt_lp_, 0, req_.logprobs, req_.tokens_as_ids);
  ordered_json j = completion_object(meta_, prompt_text_, std::move(lp), "");
  if (req_.include_usage) j["usage"] = nullptr;
  *chunk += sse_event(j);
  text_offset_ = prompt_text_.size();
}

void CompletionSession::emit_text(std::string* chunk, const std::string& text) {
  text_ += text;
  if (!chunk) return;
  size_t n_lp = lp_.size() - lp_streamed_;
  if (text.empty() && n_lp == 0) return;
  std::span<const LogprobEntry> entries(lp_.data() + lp_streamed_, n_lp);
  lp_streamed_ = lp_.size();
  ordered_json j;
  if (chat_) {
    ordered_json lp = nullptr;
    if (req_.logprobs >= 0) lp = chat_logprobs_json(tok_, entries, req_.logprobs, req_.tokens_as_ids);
    ordered_json delta;
    delta["content"] = text;
    j = chat_chunk(meta_, std::move(delta), std::move(lp), "");
  } else {
    ordered_json lp = nullptr;
    if (req_.logprobs >= 0) lp = completion_logprobs_json(tok_, entries, text_offset_, req_.logprobs, req_.tokens_as_ids);
    j = completion_object(meta_, text, std::move(lp), "");
  }
  text_offset_ += text.size();
  if (req_.include_usage) j["usage"] = nullptr;
  *chunk += sse_event(j);
}

void CompletionSession::emit_final(std::string* chunk) {
  if (!chunk || final_sent_) return;
  final_sent_ = true;
  if (!error_.empty()) {
    *chunk += sse_event(engine_error().to_json());
  } else {
    ordered_json j = chat_ ? chat_chunk(meta_, ordered_json::object(), nullptr, finish_reason_)
                           : completion_object(meta_, "", nullptr, finish_reason_);
    if (req_.include_usage) j["usage"] = nullptr;
    *chunk += sse_event(j);
    if (req_.include_usage)
      *chunk += sse_event(usage_chunk(meta_, chat_, prompt_tokens(), n_completion_, n_cached_));
  }
  *chunk += "data: [DONE]\n\n";
}

bool CompletionSession::stream_next(std::string& out, const std::function<bool()>& client_gone) {
  if (final_sent_) return false;
  if (chat_ && !role_sent_) {
    role_sent_ = true;
    ordered_json delta;
    delta["role"] = "assistant";
    delta["content"] = "";
    ordered_json j = chat_chunk(meta_, std::move(delta), nullptr, "");
    if (req_.include_usage) j["usage"] = nullptr;
    out += sse_event(j);
    return true;
  }
  bool got = false;
  if (!pending_.empty()) {
    events_.swap(pending_);
    pending_.clear();
    got = true;
  } else {
    got = channel_ && !done_ && channel_->wait(events_, std::chrono::milliseconds(100));
  }
  if (client_gone && client_gone()) {
    cancel();
    client_cancelled_ = true;
    return false;
  }
  if (got) consume(&out);
  if (done_ && !final_sent_) emit_final(&out);  // e.g. cancelled by us without a final event
  return !final_sent_;
}

ordered_json CompletionSession::run_to_end(const std::function<bool()>& client_gone) {
  while (!done_) {
    bool got = channel_->wait(events_, std::chrono::milliseconds(200));
    if (client_gone && client_gone()) {
      cancel();
      client_cancelled_ = true;
      return nullptr;
    }
    if (got) consume(nullptr);
  }
  if (!error_.empty()) throw engine_error();
  ordered_json j;
  if (chat_) {
    ordered_json lp = nullptr;
    if (req_.logprobs >= 0) lp = chat_logprobs_json(tok_, lp_, req_.logprobs, req_.tokens_as_ids);
    j = chat_object(meta_, text_, std::move(lp), finish_reason_);
  } else {
    ordered_json lp = nullptr;
    if (req_.logprobs >= 0) {
      std::vector<LogprobEntry> all;
      if (req_.echo) all = prompt_lp_;
      all.insert(all.end(), lp_.begin(), lp_.end());
      lp = completion_logprobs_json(tok_, all, 0, req_.logprobs, req_.tokens_as_ids);
    }
    j = completion_object(meta_, req_.echo ? prompt_text_ + text_ : text_, std::move(lp),
                          finish_reason_);
  }
  j["usage"] = usage_json(prompt_tokens(), n_completion_, n_cached_);
  return j;
}

}  // namespace tq

namespace tq {

ApiError CompletionSession::engine_error() const {
  if (retryable_ && (error_code_ == "memory_pressure" || error_code_ == "conversion_busy"))
    return ApiError(503, error_, "", error_code_, error_code_);
  if (error_code_ == "conversion_failed") return ApiError(500, error_, "", error_code_);
  return ApiError(500, "generation failed: " + error_, "", "engine_error");
}

bool CompletionSession::engine_may_reject() const {
  const EngineConfig& c = engine_.config();
  return c.guard.enabled || c.kv.turboquant();
}

bool CompletionSession::await_first_token(const std::function<bool()>& client_gone) {
  std::vector<EngineEvent> batch;
  for (;;) {
    bool got = channel_->wait(batch, std::chrono::milliseconds(100));
    if (got) {
      pending_.insert(pending_.end(), batch.begin(), batch.end());
      for (const EngineEvent& e : batch) {
        if (e.kind == EngineEvent::Kind::Finished) {
          if (e.reason != FinishReason::Error) return true;
          // Nothing was streamed: the error is the HTTP response itself.
          pending_.clear();
          started_ = false;
          done_ = true;
          error_ = e.error;
          error_code_ = e.error_code;
          retryable_ = e.retryable;
          throw engine_error();
        }
        if (!e.prompt) return true;  // the first generated token: streaming starts
      }
    }
    if (client_gone && client_gone()) {
      cancel();
      client_cancelled_ = true;
      return false;
    }
  }
}

}  // namespace tq
