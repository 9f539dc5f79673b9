// Host implementations of the hybrid-model ops (Qwen3.5 gated attention, Gated DeltaNet) that
// the CPU backend forwards to (cpu_hybrid_ops.cpp); exposed for the unit tests, which check them
// against naive references.
#pragma once
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace tq {

void cpu_rope_partial(float* x, int64_t T, int64_t n_head, int64_t head_dim, int64_t rot_dim,
                      int64_t pos0, std::span<const float> inv_freq);
void cpu_sigmoid_mul(float* x, const float* gate, int64_t n);
// w: [C, K] f32 (row c holds channel c's taps, oldest input first).
void cpu_causal_conv1d_silu(const float* x, int64_t T, int64_t C, int64_t K, const float* w,
                            float* state, float* out);
void cpu_delta_gates(const float* a, const float* b, int64_t T, int64_t n, const float* a_log,
                     const float* dt_bias, float* g, float* beta);
void cpu_gated_delta_rule(const DeltaRuleArgs& a);
void cpu_rms_norm_gated(const float* x, const float* gate, int64_t rows, int64_t n, const float* w,
                        float eps, float* out);

}  // namespace tq
