// CudaBackend::logits_stats (logits_stats.cu) against logits_stats_host on fresh random rows:
// heavy ties (argmax to the lowest id), -inf entries, rows of -inf only, +inf and NaN entries,
// targets and no target; stats poisoned before the call, rows out of order, the logits untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_test_util.h"

namespace tq::test {
namespace {


void check_case(Backend& be, int64_t vocab, int64_t n_rows, int iter) {
  auto& g = rng();
  std::vector<float> host(size_t(vocab * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) fill_logits_row(host.data() + r * vocab, vocab, RowShape(g() % 9));
  DeviceBuffer dev = to_dev(be, host);
  std::vector<LogitsStatsRow> rows;
  for (int64_t r = n_rows - 1; r >= 0; --r)
    if (g() % 4 != 0 || r == 0) rows.push_back({r, (g() % 5 == 0) ? -1 : int32_t(g() % uint32_t(vocab))});
  std::vector<LogitsStats> got(rows.size());
  std::memset(static_cast<void*>(got.data()), 0xA5, got.size() * sizeof(LogitsStats));  // poisoned
  be.logits_stats(dev.f32(), vocab, rows, got.data());
  std::vector<float> back = from_dev(be, dev, host.size());
  ASSERT_EQ(std::memcmp(back.data(), host.data(), host.size() * sizeof(float)), 0) << "rows changed";
  for (size_t i = 0; i < rows.size(); ++i) {
    LogitsStats want;
    logits_stats_host(host.data() + rows[i].row * vocab, vocab, rows[i].target, want);
    const std::string at = "iteration " + std::to_string(iter) + " vocab " + std::to_string(vocab) +
                           " row " + std::to_string(rows[i].row);
    EXPECT_EQ(got[i].argmax, want.argmax) << at;
    EXPECT_EQ(std::memcmp(&got[i].target_logit, &want.target_logit, 4), 0) << at;
    if (!std::isfinite(want.lse)) {
      EXPECT_TRUE(std::isnan(want.lse) ? std::isnan(got[i].lse) : got[i].lse == want.lse) << at;
    } else {
      // Another summation order (online, by thread): equal to double rounding.
      EXPECT_NEAR(got[i].lse, want.lse, 1e-12 * std::max(1.0, std::abs(want.lse))) << at;
    }
  }
}

TEST(CudaLogitsStats, MatchesTheHost) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t vocabs[] = {1, 7, 512, 513, 4099, 151936};
  int iter = 0;
  for (int64_t vocab : vocabs)
    for (int rep = 0; rep < (vocab > 10000 ? 4 : 10); ++rep)
      check_case(*be, vocab, 1 + int64_t(rng()() % 9), iter++);
}

TEST(CudaLogitsStats, ManyRowsAtOnce) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  check_case(*be, 151936, 300, 0);  // more rows than the LM head's 256-row chunk
}

TEST(CudaLogitsStats, RejectsTargetsOutsideTheVocabulary) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  std::vector<float> host(100, 0.0f);
  DeviceBuffer dev = to_dev(*be, host);
  LogitsStats out;
  const LogitsStatsRow bad[] = {{0, 100}, {0, -2}};
  for (const LogitsStatsRow& r : bad) EXPECT_THROW(be->logits_stats(dev.f32(), 100, {&r, 1}, &out), Error);
}

}  // namespace
}  // namespace tq::test
