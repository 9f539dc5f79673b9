// Qwen3.5 hybrid weights: per-layer tensors of the Gated DeltaNet and gated-attention layers,
// loaded with shape checks; zero-centred RMSNorm weights are stored as (1 + w).
#pragma once
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/model_config.h"

namespace tq::qwen3_5 {

struct DeltaNetWeights {
  Weight in_qkv;    // [conv_dim, hidden]: q (key_dim), k (key_dim), v (value_dim) rows
  Weight in_z;      // [value_dim, hidden] output gate of the gated norm
  Weight in_b;      // [n_v_head, hidden] -> beta
  Weight in_a;      // [n_v_head, hidden] -> decay
  Weight conv;      // [conv_dim, conv_kernel] depthwise taps (stored [conv_dim, 1, kernel])
  Weight a_log;     // [1, n_v_head]
  Weight dt_bias;   // [1, n_v_head]
  Weight norm;      // [1, v_head_dim] gated RMSNorm (plain w: not zero-centred)
  Weight out;       // [hidden, value_dim]
};

struct AttentionWeights {
  Weight q;         // [q_dim, hidden]: the query half of q_proj's rows
  Weight gate;      // [q_dim, hidden]: the output-gate half (absent without attn_output_gate)
  Weight k, v;      // [kv_dim, hidden]
  Weight o;         // [hidden, q_dim]
  Weight q_norm, k_norm;  // [1, head_dim], (1 + w)
};

struct LayerWeights {
  bool linear = false;  // Gated DeltaNet (else gated full attention)
  Weight input_norm, post_norm;  // [1, hidden], (1 + w)
  DeltaNetWeights dn;
  AttentionWeights attn;
  Weight mlp_gate, mlp_up, mlp_down;  // [inter, hidden] x2, [hidden, inter]
};

struct Weights {
  Weight embed;    // [vocab, hidden]
  Weight norm;     // [1, hidden], (1 + w)
  Weight lm_head;  // [vocab, hidden]; absent when tied
  std::vector<LayerWeights> layers;
  size_t bytes = 0;  // on the backend
};

Weights load_weights(const ModelConfig& c, const TensorStore& store, Backend& be,
                     const std::function<void(int64_t, int64_t)>& progress);

}  // namespace tq::qwen3_5
