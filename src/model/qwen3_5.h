// The Qwen3.5 hybrid text model (Qwen3_5ForCausalLM): Gated DeltaNet layers interleaved with
// gated full-attention layers. Model::load dispatches here on the architecture.
#pragma once
#include <functional>
#include <memory>

#include "io/safetensors.h"
#include "kv/recurrent_cache.h"
#include "model/model.h"

namespace tq {

std::unique_ptr<Model> load_qwen3_5(const ModelConfig& cfg, const TensorStore& store, Backend& be,
                                    const std::function<void(int64_t, int64_t)>& on_progress);

// The fixed-size state one Gated DeltaNet layer of this config keeps per sequence.
RecurrentShape recurrent_shape(const ModelConfig& cfg);

}  // namespace tq
