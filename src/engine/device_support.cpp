// Device backends: the process-wide registry of their allocations, the guard's device probe,
// and the TurboQuant-on-device check of a KV policy.
#include "engine/device_support.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "quant/vector_codec.h"

namespace tq {

bool is_device_backend(const Backend& be) {
  // By name too: a device whose memory query failed still holds device pointers.
  return std::string_view(be.name()) != "cpu" || be.memory_capacity().total > 0;
}

DeviceBackends& DeviceBackends::global() {
  static DeviceBackends reg;
  return reg;
}

void DeviceBackends::add(const Backend* be) {
  std::lock_guard<std::mutex> lk(mu_);
  if (std::find(backends_.begin(), backends_.end(), be) == backends_.end()) backends_.push_back(be);
}

void DeviceBackends::remove(const Backend* be) {
  std::lock_guard<std::mutex> lk(mu_);
  backends_.erase(std::remove(backends_.begin(), backends_.end(), be), backends_.end());
}

uint64_t DeviceBackends::allocated_with(const Backend& be) const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t sum = 0;
  bool seen = false;
  for (const Backend* b : backends_) {
    sum += b->allocated_bytes();
    seen = seen || b == &be;
  }
  return seen ? sum : sum + be.allocated_bytes();
}

std::function<DeviceMemory()> device_memory_probe(const Backend& be, DeviceBackends& reg) {
  return [&be, &reg] {
    const MemoryCapacity cap = be.memory_capacity();
    return DeviceMemory{reg.allocated_with(be), cap.free, cap.total};
  };
}

void check_backend_kv(const Backend& be, const KvPolicy& policy, const ModelConfig& mc) {
  if (!policy.turboquant() || !is_device_backend(be)) return;
  quant::TqFormat f = policy.format;
  f.head_dim = int(mc.head_dim);
  // Without per-layer seeds every layer has the same codecs: one check covers them all.
  const int n_check = f.per_layer_seeds ? int(mc.n_layer) : std::min<int>(1, int(mc.n_layer));
  for (int layer = 0; layer < n_check; ++layer) {
    if (policy.keep_dense.count(layer) && f.per_layer_seeds) continue;
    const quant::VectorCodec k(f.key_config(layer)), v(f.value_config(layer));
    if (!be.device_turboquant(k, v))
      fail("the {} backend cannot keep this TurboQuant KV cache in device memory (K{}/V{} bits, "
           "{} rotation, head_dim {}, layer {}): use --kv dense, a format the device supports, "
           "or --device cpu",
           be.name(), f.key_width.name(), f.value_width.name(),
           quant::rotation_name(f.key_rotation), f.head_dim, layer);
  }
}

}  // namespace tq
