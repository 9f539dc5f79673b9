// Shared setup of the hybrid golden tests: tiny-qwen35 (../shared) loaded once on the CPU backend,
// its reference cases, and helpers to snapshot a sequence's recurrent state.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "common/reference_cases.h"
#include "kv/recurrent_cache.h"
#include "model/model.h"

namespace tq::test {

struct HybridModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<ReferenceCases> ref;
};

// The loaded fixture, or nullptr when ../shared/models/tiny-qwen35 is absent.
inline HybridModel* tiny_qwen35() {
  static std::unique_ptr<HybridModel> m = [] {
    std::unique_ptr<HybridModel> out;
    auto dir = shared_path("models/tiny-qwen35");
    if (!dir) return out;
    out = std::make_unique<HybridModel>();
    out->backend = make_cpu_backend();
    out->model = Model::load(*dir, *out->backend);
    out->ref = std::make_unique<ReferenceCases>(*dir / "reference");
    return out;
  }();
  return m.get();
}

#define TQ_REQUIRE_TINY_QWEN35(var)                                                    \
  HybridModel* var = tiny_qwen35();                                                    \
  if (!var) GTEST_SKIP() << "../shared/models/tiny-qwen35 is absent: skipping"

// Every recurrent layer's conv state then recurrent state, concatenated, in layer order.
inline std::vector<float> recurrent_snapshot(const KvCache& cache) {
  std::vector<float> out;
  for (const auto& l : cache.layers)
    if (l->kind() == CacheKind::Recurrent) {
      const auto& rc = static_cast<const RecurrentCache&>(*l);
      auto a = rc.read_conv_state(), b = rc.read_recurrent_state();
      out.insert(out.end(), a.begin(), a.end());
      out.insert(out.end(), b.begin(), b.end());
    }
  return out;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace tq::test
