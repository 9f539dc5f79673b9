// CudaBackend::logits_top (logits_top.cu) against logits_top_host on fresh random rows: ties,
// -inf entries, fewer finite entries than kLogitsTop, signed zeros, adjustments (adds and -inf
// masks), ranking divisors; summaries poisoned before the call, the rows not asked for untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_test_util.h"

namespace tq::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void check_case(Backend& be, int64_t vocab, int64_t n_rows, int iter) {
  auto& g = rng();
  std::vector<float> host(size_t(vocab * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) fill_logits_row(host.data() + r * vocab, vocab, RowShape(g() % 7));  // not PosInf / NaN
  DeviceBuffer dev = to_dev(be, host);
  // Every other row, out of order; some with adjustments.
  std::vector<std::vector<LogitAdjust>> adj;
  std::vector<LogitsTopRow> rows;
  for (int64_t r = n_rows - 1; r >= 0; r -= 2) {
    std::vector<LogitAdjust> a;
    const int n = (g() % 2) ? int(g() % 10) : 0;
    for (int i = 0; i < n; ++i)
      a.push_back({int32_t(g() % uint32_t(vocab)), (g() % 3 == 0) ? -kInf : -0.5f * float(1 + g() % 6)});
    adj.push_back(a);
  }
  const float divisors[] = {1.0f, 0.7f, 1.3f, 0.05f};
  for (int64_t r = n_rows - 1, k = 0; r >= 0; r -= 2, ++k)
    rows.push_back({r, divisors[g() % 4], bool(g() % 4 != 0), adj[size_t(k)]});
  std::vector<LogitsTop> got(rows.size());
  std::memset(static_cast<void*>(got.data()), 0xA5, got.size() * sizeof(LogitsTop));  // poisoned
  be.logits_top(dev.f32(), vocab, rows, got.data());
  // The reference: the adjusted host rows ranked on the host.
  std::vector<float> want_rows = host;
  for (const LogitsTopRow& r : rows)
    for (const LogitAdjust& a : r.adjust) {
      float& x = want_rows[size_t(r.row * vocab + a.id)];
      x = a.delta == -kInf ? -kInf : x + a.delta;
    }
  std::vector<float> back = from_dev(be, dev, host.size());
  ASSERT_EQ(std::memcmp(back.data(), want_rows.data(), host.size() * sizeof(float)), 0)
      << "the rows after the adjustments (iteration " << iter << ")";
  for (size_t i = 0; i < rows.size(); ++i) {
    LogitsTop want;
    logits_top_host(want_rows.data() + rows[i].row * vocab, vocab, rows[i].divisor, rows[i].lse, want);
    for (int j = 0; j < kLogitsTop; ++j) {
      ASSERT_EQ(got[i].id[j], want.id[j]) << "iteration " << iter << " vocab " << vocab << " row "
                                          << rows[i].row << " divisor " << rows[i].divisor << " entry " << j;
      ASSERT_EQ(std::memcmp(&got[i].logit[j], &want.logit[j], 4), 0);
    }
    if (!rows[i].lse) {
      EXPECT_TRUE(std::isnan(got[i].lse));
    } else if (!std::isfinite(want.lse)) {
      EXPECT_EQ(got[i].lse, want.lse);
    } else {
      // A different summation order: equal to double rounding.
      EXPECT_NEAR(got[i].lse, want.lse, 1e-12 * std::max(1.0, std::abs(want.lse))) << iter;
    }
  }
}

// Both kernels: radix select only (TQ_LOGITS_TOP=1) and the prefilter (=2, the default).
class CudaLogitsTop : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { setenv("TQ_LOGITS_TOP", GetParam(), 1); }
  void TearDown() override { unsetenv("TQ_LOGITS_TOP"); }
};

TEST_P(CudaLogitsTop, MatchesTheHostRanking) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  const int64_t vocabs[] = {64, 65, 1000, 4099, 151936};
  int iter = 0;
  for (int64_t vocab : vocabs)
    for (int rep = 0; rep < (vocab > 10000 ? 6 : 12); ++rep)
      check_case(*be, vocab, 1 + int64_t(rng()() % 9), iter++);
}

TEST_P(CudaLogitsTop, ManyRowsAtOnce) {
  TQ_REQUIRE_GPU();
  auto be = make_cuda_backend();
  check_case(*be, 151936, 64, 0);  // 32 summaries in one launch, as a batch-32 decode step
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaLogitsTop, ::testing::Values("1", "2"));

}  // namespace
}  // namespace tq::test
