// bench_turboquant_quality: TurboQuant vs dense on the fixture models' reference texts: mean NLL
// and its delta, mean KL(dense || tq), top-1 agreement, needles, peak KV bytes, for each width,
// compressed from the start and converted mid-prefill at half of each text.
// Usage: bench_turboquant_quality [--widths 8/8,4/4c,...] [--recent N] [model_dir ...]
// (default widths 8/8,4/4,4/4c,3.5/3.5,3/3,2/2, where a trailing c means norm correction;
// default model models/micro-qwen3)
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "io/safetensors.h"

using namespace tq;

namespace {

struct Row {
  double nll = 0, kl = 0, top1 = 0;
  int64_t positions = 0, agree = 0, needles = 0, needle_total = 0;
  size_t kv_peak = 0;
};

std::vector<int32_t> ints(const SafetensorsFile& f, const std::string& name) {
  TensorView t = f.find(name);
  std::vector<int32_t> v(size_t(t.info->numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

int64_t g_recent = KvPolicy{}.recent_exact;  // --recent N (default: the product default)

struct Width {
  double k, v;
  bool corrected;
};

std::vector<Width> parse_widths(const std::string& s) {
  std::vector<Width> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    std::string item = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    Width w{};
    w.corrected = !item.empty() && item.back() == 'c';
    if (w.corrected) item.pop_back();
    size_t slash = item.find('/');
    w.k = std::stod(item.substr(0, slash));
    w.v = slash == std::string::npos ? w.k : std::stod(item.substr(slash + 1));
    out.push_back(w);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

void run_model(const std::string& dir, const std::vector<Width>& widths) {
  auto be = make_cpu_backend();
  auto model = Model::load(dir, *be);
  SafetensorsFile ref(dir + "/reference/reference.safetensors");
  const int64_t V = model->config().vocab_size;
  std::vector<std::string> texts = {"logits_3", "logits_4"};
  std::vector<std::string> needles;
  for (const auto& t : ref.header().tensors)
    if (t.name.rfind("needle_", 0) == 0 && t.name.find(".ids") != std::string::npos)
      needles.push_back(t.name.substr(0, t.name.size() - 4));

  // Dense baseline: keep every logits row as log-probabilities for the KL.
  std::vector<std::vector<float>> dense_logp;
  std::vector<std::vector<int32_t>> dense_argmax;
  Row dense;
  for (const auto& name : texts) {
    auto ids = ints(ref, name + ".ids");
    std::vector<float> lp(ids.size() * size_t(V));
    ScoreOptions o;
    o.on_logits = [&](int64_t pos, const float* row) {
      double mx = *std::max_element(row, row + V), se = 0;
      for (int64_t v = 0; v < V; ++v) se += std::exp(double(row[v]) - mx);
      double lse = mx + std::log(se);
      for (int64_t v = 0; v < V; ++v) lp[size_t(pos * V + v)] = float(row[v] - lse);
    };
    ScoreResult r = score(*model, ids, o);
    dense.nll += r.mean_nll / double(texts.size());
    dense.kv_peak = std::max(dense.kv_peak, r.kv_peak_bytes);
    dense_logp.push_back(std::move(lp));
    dense_argmax.push_back(r.argmax);
  }
  auto needle_pass = [&](const ScoreOptions& base, bool mid, Row& row) {
    for (const auto& doc : needles) {
      auto ids = ints(ref, doc + ".ids");
      auto spans = ints(ref, doc + ".spans");
      ScoreOptions o = base;
      o.chunk = 1024;
      if (mid) o.kv.convert_at = int64_t(ids.size() / 2);
      ScoreResult r = score(*model, ids, o);
      for (size_t s = 0; s + 1 < spans.size(); s += 2) {
        bool ok = true;
        for (int q = spans[s] - 1; q <= spans[s + 1] - 2; ++q)
          ok = ok && r.argmax[size_t(q)] == ids[size_t(q + 1)];
        row.needles += ok;
        ++row.needle_total;
      }
    }
  };
  needle_pass(ScoreOptions{}, false, dense);
  std::printf("\n%s (dense: mean NLL %.4f, needles %lld/%lld, peak KV %.1f MiB on the longest text)\n",
              dir.c_str(), dense.nll, (long long)dense.needles, (long long)dense.needle_total,
              double(dense.kv_peak) / (1 << 20));
  std::printf("| K/V bits | norm | mode | mean NLL | dNLL | mean KL | top-1 | needles | peak KV MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Width& w : widths) {
    {
      for (bool mid : {false, true}) {
        Row row;
        ScoreOptions base;
        base.kv.mode = KvPolicy::Mode::TurboQuant;
        base.kv.format.head_dim = int(model->config().head_dim);
        base.kv.format.key_width = quant::QuantWidth::parse(w.k);
        base.kv.format.value_width = quant::QuantWidth::parse(w.v);
        base.kv.format.norm.corrected = w.corrected;
        base.kv.recent_exact = g_recent;
        for (size_t ti = 0; ti < texts.size(); ++ti) {
          auto ids = ints(ref, texts[ti] + ".ids");
          ScoreOptions o = base;
          o.kv.convert_at = mid ? int64_t(ids.size() / 2) : 0;
          const int64_t from = o.kv.convert_at;
          double kl = 0;
          o.on_logits = [&](int64_t pos, const float* r) {
            if (pos < from) return;
            double mx = *std::max_element(r, r + V), se = 0;
            for (int64_t v = 0; v < V; ++v) se += std::exp(double(r[v]) - mx);
            double lse = mx + std::log(se), k = 0;
            const float* p = dense_logp[ti].data() + pos * V;
            for (int64_t v = 0; v < V; ++v) k += std::exp(double(p[v])) * (p[v] - (r[v] - lse));
            kl += k;
          };
          ScoreResult r = score(*model, ids, o);
          row.nll += r.mean_nll / double(texts.size());
          row.kl += kl;
          for (size_t i = size_t(from); i < ids.size(); ++i)
            row.agree += r.argmax[i] == dense_argmax[ti][i];
          row.positions += int64_t(ids.size()) - from;
          row.kv_peak = std::max(row.kv_peak, r.kv_peak_bytes);
        }
        needle_pass(base, mid, row);
        std::printf("| %g/%g | %s | %s | %.4f | %+.2f%% | %.5f | %.2f%% | %lld/%lld | %.2f |\n", w.k,
                    w.v, w.corrected ? "corrected" : "plain", mid ? "mid-prefill @ half" : "from start",
                    row.nll, 100 * (row.nll / dense.nll - 1), row.kl / double(row.positions),
                    100.0 * double(row.agree) / double(row.positions), (long long)row.needles,
                    (long long)row.needle_total, double(row.kv_peak) / (1 << 20));
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  std::vector<Width> widths = parse_widths("8/8,4/4,4/4c,3.5/3.5,3/3,2/2");
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--widths" && i + 1 < argc) widths = parse_widths(argv[++i]);
    else if (a == "--recent" && i + 1 < argc) g_recent = std::stoll(argv[++i]);
    else dirs.push_back(a);
  }
  if (dirs.empty()) dirs.push_back("models/micro-qwen3");
  for (const auto& d : dirs) run_model(d, widths);
  return 0;
}
