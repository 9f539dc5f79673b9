// Model: a loaded causal LM (weights on a backend) and its forward pass over a KvCache.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "model/model_config.h"

namespace tq {

enum class LogitsMode { Last, All };

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  // Bytes of weights held on the backend.
  size_t weight_bytes() const { return weight_bytes_; }

  // A fresh cache: dense layers for full attention, rotating ones for sliding windows.
  KvCache new_cache() const;

  // One sequence's part of a batched step: ids run at positions cache->n_tokens() ..,
  // appended to its cache; logits (host memory, [1 or ids.size(), vocab]) written per mode.
  // With `top` (mode Last): the last row's adjustments are applied and its LogitsTop summary
  // (Backend::logits_top: ranked by logit / top_divisor, lse when top_lse) is written to *top
  // instead of the row (logits may be null). Neither logits nor top: no output for the step.
  // Mode All with `stats`: every row's LogitsStats (Backend::logits_stats, target targets[t],
  // -1 for none) goes to stats[t], and logits, when set, takes only the rows t >= logits_from
  // (row t at logits + (t - logits_from) * vocab): the others never leave the backend.
  struct SeqStep {
    std::span<const int32_t> ids;
    KvCache* cache = nullptr;
    LogitsMode mode = LogitsMode::Last;
    float* logits = nullptr;
    LogitsTop* top = nullptr;
    float top_divisor = 1.0f;
    bool top_lse = false;
    std::span<const LogitAdjust> adjust{};
    LogitsStats* stats = nullptr;
    const int32_t* targets = nullptr;
    int64_t logits_from = 0;
  };
  // Runs several sequences in one step: their tokens share every linear layer; attention runs
  // per sequence on its own cache. Token ids must be in [0, vocab) (checked before any work:
  // throws Error). Not reentrant.
  virtual void forward_batch(std::span<const SeqStep> steps) = 0;

  void forward(std::span<const int32_t> ids, KvCache& cache, LogitsMode mode, float* logits) {
    SeqStep s{ids, &cache, mode, logits};
    forward_batch(std::span<const SeqStep>(&s, 1));
  }

  // Loads config.json and the safetensors weights of a model directory onto the backend.
  // on_progress(done, total) is called as tensors load.
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, Backend& backend,
                                     const std::function<void(int64_t, int64_t)>& on_progress = {});

 protected:
  // Validates a step (non-empty sequences, caches with one layer per model layer, ids in
  // range) and gathers its tokens, concatenated, and each sequence's first position, fixed
  // before any layer appends (layer 0's length changes as it runs). Throws Error.
  void gather_step(std::span<const SeqStep> steps, std::vector<int32_t>& ids,
                   std::vector<int64_t>& pos0) const;

  // Rows of logits the LM head computes at once (bounds the logits workspace).
  static constexpr int64_t kLogitRows = 256;
  // Final norm and LM head on the rows each sequence wants (its last, or all), in chunks of
  // kLogitRows through logits_ws [kLogitRows, vocab]; h is scratch [kLogitRows, hidden]. Rows
  // with a `top` destination are summarized on the backend (model_logits.cpp).
  void write_logits(std::span<const SeqStep> steps, const float* x, float* h, const Weight& norm,
                    const Weight& head, float* logits_ws) const;
  // x += down(silu(gate(norm(x))) * up(norm(x))) over T rows; h, gate_ws, up_ws are scratch.
  void swiglu_mlp(float* x, int64_t T, const Weight& norm, const Weight& gate, const Weight& up,
                  const Weight& down, float* h, float* gate_ws, float* up_ws) const;

  ModelConfig config_;
  Backend* backend_ = nullptr;
  size_t weight_bytes_ = 0;
};

}  // namespace tq
