// The CPU backend: fp32 arithmetic (weights widened from bf16/f16 at load), OpenBLAS GEMMs
// split across the thread pool. It is the numerical reference for every other backend.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace tq {

std::unique_ptr<Backend> make_cpu_backend();

// Exposed for tests: the attention kernel the CPU backend uses.
void cpu_attention(const AttentionArgs& a);

}  // namespace tq
