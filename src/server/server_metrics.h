// ServerMetrics: HTTP request counters by endpoint and outcome, and the Prometheus text
// exposition of them together with the engine's token, throughput, queue and KV statistics.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_loop.h"

namespace tq {

// Resident set size of this process in bytes (0 when unknown).
size_t process_rss_bytes();

class ServerMetrics {
 public:
  // outcome: success, invalid, unauthorized, not_found, too_large, rejected, cancelled, error
  void record_request(const std::string& endpoint, const std::string& outcome);
  int64_t requests(const std::string& endpoint, const std::string& outcome) const;

  std::atomic<int64_t> inflight{0};  // generation requests being served
  std::atomic<int64_t> client_cancellations{0};

  // Prometheus text format 0.0.4 for the named models' engines.
  std::string render(const std::vector<std::pair<std::string, EngineStats>>& engines) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;
};

}  // namespace tq
