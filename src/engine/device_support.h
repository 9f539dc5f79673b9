// The engine on a device backend (a GPU): the device memory the memory guard counts (every
// device backend of the process, the device's free and total bytes) and the check that a KV
// policy's TurboQuant layers can live in the backend's memory.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_policy.h"
#include "model/model_config.h"
#include "sched/memory_guard.h"

namespace tq {

// A backend whose memory is a device's: any backend but the CPU's, or one whose
// memory_capacity() reports a total.
bool is_device_backend(const Backend& be);

// The device backends of this process (an EngineLoop registers its own while it lives), so
// that every engine's guard counts every model's device memory, as RSS counts every model's
// host memory. Thread-safe.
class DeviceBackends {
 public:
  static DeviceBackends& global();
  void add(const Backend* be);
  void remove(const Backend* be);
  // Bytes allocated by every registered backend, plus `be`'s when it is not registered.
  uint64_t allocated_with(const Backend& be) const;

 private:
  mutable std::mutex mu_;
  std::vector<const Backend*> backends_;
};

// The guard's device probe for `be`: the process's device allocations (through `reg`) and the
// device's free and total memory. `be` and `reg` must outlive the function.
std::function<DeviceMemory()> device_memory_probe(const Backend& be,
                                                  DeviceBackends& reg = DeviceBackends::global());

// Throws Error when `policy` would keep TurboQuant layers that `be` cannot hold in its own
// memory (a device backend whose device_turboquant() refuses the policy's codecs): such a cache
// must be refused at load or request time, never used with device pointers. A host backend
// holds every codec. `mc` gives the layers and head_dim.
void check_backend_kv(const Backend& be, const KvPolicy& policy, const ModelConfig& mc);

}  // namespace tq
