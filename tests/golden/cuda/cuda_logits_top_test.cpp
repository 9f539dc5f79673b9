// Sampling on the device through the model (Model::SeqStep::top on the CUDA backend): a batched
// micro-qwen3 step's LogitsTop summaries (one adjusted and ranked by logit / 0.7, one with its
// log-sum-exp) equal logits_top_host on the full rows the same step gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "common/fixtures.h"
#include "model/model.h"

namespace tq::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CudaLogitsTop, ModelStepSummariesEqualTheirRows) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA GPU here: " << cuda_device_summary();
  std::mt19937 g{std::random_device{}()};
  auto be = make_cuda_backend();
  auto model = Model::load(repo_path("models/micro-qwen3"), *be);
  const int64_t V = model->config().vocab_size;
  std::vector<int32_t> prompt(37), other(11);
  for (auto& id : prompt) id = int32_t(5 + g() % uint32_t(V - 5));
  for (auto& id : other) id = int32_t(5 + g() % uint32_t(V - 5));
  // The same batched step twice: full rows, then summaries (one sequence adjusted, scaled).
  const std::vector<LogitAdjust> adj = {{3, -kInf}, {int32_t(prompt[0]), -1.5f}, {7, 2.0f}};
  std::vector<float> rows(size_t(2 * V));
  LogitsTop top[2];
  std::memset(static_cast<void*>(top), 0xA5, sizeof top);
  for (int pass = 0; pass < 2; ++pass) {
    KvCache a = model->new_cache(), b = model->new_cache();
    Model::SeqStep st[2] = {{prompt, &a, LogitsMode::Last, rows.data()},
                            {other, &b, LogitsMode::Last, rows.data() + V}};
    if (pass == 1) {
      st[0].logits = st[1].logits = nullptr;
      st[0].top = &top[0];
      st[0].top_divisor = 0.7f;
      st[0].adjust = adj;
      st[1].top = &top[1];
      st[1].top_lse = true;
    }
    model->forward_batch(st);
  }
  for (const LogitAdjust& x : adj) rows[size_t(x.id)] = x.delta == -kInf ? -kInf : rows[size_t(x.id)] + x.delta;
  LogitsTop want[2];
  logits_top_host(rows.data(), V, 0.7f, false, want[0]);
  logits_top_host(rows.data() + V, V, 1.0f, true, want[1]);
  for (int s = 0; s < 2; ++s)
    for (int j = 0; j < kLogitsTop; ++j) {
      ASSERT_EQ(top[s].id[j], want[s].id[j]) << s << " " << j;
      ASSERT_EQ(std::memcmp(&top[s].logit[j], &want[s].logit[j], 4), 0) << s << " " << j;
    }
  EXPECT_NEAR(top[1].lse, want[1].lse, 1e-12 * std::abs(want[1].lse));
}

}  // namespace
}  // namespace tq::test
