// Fuzz target: config.json parsing over arbitrary bytes: an Error or a valid config, never a crash.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model_config.h"
#include "model/rope.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    tq::ModelConfig c = tq::ModelConfig::from_json(j);
    if (int64_t(c.layer_types.size()) != c.n_layer || c.n_head % c.n_head_kv) std::abort();
    (void)tq::rope_inv_freq(c.rope, c.head_dim);
  } catch (const tq::Error&) {
  }
  return 0;
}
