// Launch side of the CUDA logits summaries: logits_top (logits_top.cu: per logits row, adjustments
// in place, then the kLogitsTop best entries and the log-sum-exp) and logits_stats
// (logits_stats.cu: log-sum-exp, argmax and a target's logit), each downloaded in one copy. Plain
// C++ (streams as void*), internal to src/backend/cuda; the structs mirror backend.h's field for
// field.
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

struct StatsRowDesc {  // backend.h's LogitsStatsRow
  int64_t row;
  int32_t target;
};
struct RowStats {  // backend.h's LogitsStats
  double lse;
  float target_logit;
  int32_t argmax;
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
  // Writes every row's stats to out[rows.size()] (host) and waits for the stream. Targets are -1
  // or in [0, vocab) (raises otherwise).
  void run_stats(const float* logits, int64_t vocab, std::span<const StatsRowDesc> rows,
                 RowStats* out, void* stream);

 private:
  void grow(size_t bytes);
  static size_t round8(size_t n);
  // One launch's staging, on host and device alike: [outputs | the inputs]. stage() copies the
  // inputs (pieces laid out from in_at, each 8-byte aligned) to the device and returns the
  // device base; fetch() brings the outputs back once the launch is queued.
  struct Piece {
    const void* data;
    size_t bytes;
  };
  char* stage(size_t in_at, std::span<const Piece> in, void* stream);
  void fetch(void* out, size_t out_bytes, void* stream);
  void* host_ = nullptr;  // pinned: [descs | adjustments] in, summaries out
  void* dev_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace tq::cuda
