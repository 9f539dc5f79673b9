// Prometheus series of the prefix cache (docs/prefix-cache.md): lookups, restored tokens, blocks
// and bytes per tier, evictions, rejected block files and the SSD writer's queue.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_loop.h"

namespace tq {

// Appends the series for every engine that has a prefix cache (nothing when none has).
void render_prefix_metrics(std::string& out,
                           const std::vector<std::pair<std::string, EngineStats>>& engines);

}  // namespace tq
