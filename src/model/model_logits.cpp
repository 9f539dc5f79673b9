// Model::write_logits: the final norm and LM head on the rows a step's sequences want, and what
// leaves the backend for each: its full logits rows, a LogitsTop summary ranked on the backend,
// or the LogitsStats that scoring needs.
#include <algorithm>
#include <vector>

#include "model/model.h"

namespace tq {

void Model::write_logits(std::span<const SeqStep> steps, const float* x, float* h,
                         const Weight& norm, const Weight& head, float* logits_ws) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const float eps = float(c.rms_norm_eps);
  // The rows the sequences want (the last of each, or all of a prompt_logprobs chunk) share
  // the LM head in chunks of up to kLogitRows: at batch B the head's weights stream once per
  // chunk, not once per sequence.
  struct Want {
    int64_t row;
    float* dst;              // the full row's destination, or null
    const SeqStep* summary;  // the step whose LogitsTop this row gives, or null
    LogitsStats* stats;      // this row's LogitsStats destination, or null
    int32_t target;
  };
  std::vector<Want> want;
  int64_t row = 0;
  for (const SeqStep& st : steps) {
    const int64_t n = int64_t(st.ids.size());
    if (st.mode == LogitsMode::Last && st.top) {
      want.push_back({row + n - 1, nullptr, &st, nullptr, -1});
    } else if (st.mode == LogitsMode::All && st.stats) {
      for (int64_t t = 0; t < n; ++t) {
        float* dst = st.logits && t >= st.logits_from ? st.logits + (t - st.logits_from) * V : nullptr;
        want.push_back({row + t, dst, nullptr, st.stats + t, st.targets ? st.targets[t] : -1});
      }
    } else if (st.logits) {
      const int64_t first = st.mode == LogitsMode::Last ? row + n - 1 : row;
      for (int64_t t = first; t < row + n; ++t)
        want.push_back({t, st.logits + (t - first) * V, nullptr, nullptr, -1});
    }
    row += n;
  }
  std::vector<LogitsTopRow> top_rows;
  std::vector<LogitsTop> tops;
  std::vector<LogitsStatsRow> stat_rows;
  std::vector<LogitsStats> stats;
  for (size_t c0 = 0; c0 < want.size(); c0 += size_t(kLogitRows)) {
    const size_t m = std::min(want.size() - c0, size_t(kLogitRows));
    const Want* w = want.data() + c0;
    // Runs of consecutive source rows: one run reads x in place, several are normed into h.
    auto run_end = [&](size_t i, auto same) {
      size_t j = i + 1;
      while (j < m && same(w[j - 1], w[j])) ++j;
      return j;
    };
    auto next_row = [](const Want& a, const Want& b) { return b.row == a.row + 1; };
    const Weight* heads[] = {&head};
    float* out[] = {logits_ws};
    if (run_end(0, next_row) == m) {
      backend_->norm_linear(x + w[0].row * H, int64_t(m), norm, eps, h, heads, out);
    } else {
      for (size_t i = 0; i < m;) {
        const size_t j = run_end(i, next_row);
        backend_->rms_norm(x + w[i].row * H, int64_t(j - i), norm, eps, h + int64_t(i) * H);
        i = j;
      }
      backend_->linear(h, int64_t(m), head, logits_ws, nullptr);
    }
    // Full rows: destinations that follow each other in host memory take one download.
    auto next_dst = [V](const Want& a, const Want& b) { return b.dst && b.dst == a.dst + V; };
    for (size_t i = 0; i < m;) {
      if (!w[i].dst) {
        ++i;
        continue;
      }
      const size_t j = run_end(i, next_dst);
      backend_->download(w[i].dst, logits_ws + int64_t(i) * V, (j - i) * size_t(V) * sizeof(float));
      i = j;
    }
    // Scoring stats: one logits_stats call for the chunk's rows that want them.
    stat_rows.clear();
    for (size_t i = 0; i < m; ++i)
      if (w[i].stats) stat_rows.push_back({int64_t(i), w[i].target});
    if (!stat_rows.empty()) {
      stats.resize(stat_rows.size());
      backend_->logits_stats(logits_ws, V, stat_rows, stats.data());
      for (size_t i = 0, k = 0; i < m; ++i)
        if (w[i].stats) *w[i].stats = stats[k++];
    }
    // Summaries: one logits_top call for the chunk's rows that want one.
    top_rows.clear();
    for (size_t i = 0; i < m; ++i)
      if (const SeqStep* st = w[i].summary)
        top_rows.push_back({int64_t(i), st->top_divisor, st->top_lse, st->adjust});
    if (top_rows.empty()) continue;
    tops.resize(top_rows.size());
    backend_->logits_top(logits_ws, V, top_rows, tops.data());
    for (size_t i = 0, k = 0; i < m; ++i)
      if (w[i].summary) *w[i].summary->top = tops[k++];
  }
}

}  // namespace tq
