// RoPE inverse frequencies for the supported rope types, computed as transformers does (fp32).
#pragma once
#include <vector>

#include "model/model_config.h"

namespace tq {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace tq
