// Fuzz target: the safetensors header parser over arbitrary bytes must throw Error or succeed,
// never crash, and every tensor it accepts must lie inside the buffer.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tq::SafetensorsHeader h = tq::parse_safetensors(std::span<const uint8_t>(data, size));
    for (const auto& t : h.tensors)
      if (h.data_offset + t.end > size || t.begin > t.end) std::abort();
  } catch (const tq::Error&) {
  }
  return 0;
}
