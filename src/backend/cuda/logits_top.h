// Launch side of the CUDA logits_top kernel (logits_top.cu): per logits row, adjustments in place,
// then the kLogitsTop best entries and the log-sum-exp, downloaded in one copy. Plain C++ (streams
// as void*), internal to src/backend/cuda; the structs mirror backend.h's field for field.
#pragma once
#include <cstdint>
#include <span>

namespace tq::cuda {

constexpr int kTopEntries = 64;  // backend.h's kLogitsTop
struct TopSummary {              // backend.h's LogitsTop
  double lse;
  int32_t id[kTopEntries];
  float logit[kTopEntries];
};
struct TopAdjust {  // backend.h's LogitAdjust
  int32_t id;
  float delta;
};
struct TopRowDesc {  // one row of a launch
  int64_t row;
  float divisor;
  int32_t lse;               // 1: compute TopSummary::lse
  int32_t adj_begin, adj_count;  // its adjustments in the launch's TopAdjust table
};

// Pinned staging and device tables of the launches, grown on demand, freed with the owner.
class LogitsTopWorkspace {
 public:
  LogitsTopWorkspace() = default;
  LogitsTopWorkspace(const LogitsTopWorkspace&) = delete;
  LogitsTopWorkspace& operator=(const LogitsTopWorkspace&) = delete;
  ~LogitsTopWorkspace();
  // Applies the adjustments to logits [*, vocab] (device) in place, ranks every row of `rows`,
  // writes the summaries to out[rows.size()] (host) and waits for the stream. vocab >= 64.
  void run(float* logits, int64_t vocab, std::span<const TopRowDesc> rows,
           std::span<const TopAdjust> adjust, TopSummary* out, void* stream);

 private:
  void grow(size_t bytes);
  void* host_ = nullptr;  // pinned: [descs | adjustments] in, summaries out
  void* dev_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace tq::cuda
