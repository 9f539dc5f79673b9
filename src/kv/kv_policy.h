// KvPolicy: how a sequence's KV cache is stored: dense, or TurboQuant on the eligible layers
// (converted after prefill, or mid-prefill at a token count), and the bounded conversion slice.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "quant/tq_format.h"

namespace tq {

struct KvPolicy {
  enum class Mode : uint8_t { Dense, TurboQuant };
  Mode mode = Mode::Dense;
  quant::TqFormat format;       // widths, rotations, seeds (head_dim is set from the model)
  std::set<int> keep_dense;     // full-attention layers that stay dense (policy knob)
  int64_t convert_at = 0;       // > 0: convert once the cache holds this many tokens (forced
                                // mid-prefill trigger); 0: convert after the prefill
  int64_t slice_tokens = 8192;  // tokens per conversion step (bounds conversion's transient memory)
  int64_t recent_exact = 128;   // compressed layers keep their last N tokens exact too

  // Norm correction is on by default: on the fixture models it cuts 4-bit KL by 2-3x at no
  // memory cost (bench/results/turboquant-quality-*.md).
  KvPolicy() { format.norm.corrected = true; }

  bool turboquant() const { return mode == Mode::TurboQuant; }
  std::string describe() const;
};

// Parses "0,3" / "last" / "first,last" / "" into layer indices among n_layer layers; throws
// Error on anything else or an index out of range.
std::set<int> parse_layer_list(const std::string& text, int n_layer);

}  // namespace tq
