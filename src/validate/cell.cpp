// run_cell: the work of one validation cell, run in a supervised child process.
#include "validate/cell.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "core/memory_probe.h"
#include "engine/generate.h"
#include "io/file.h"
#include "io/sha256.h"
#include "validate/atomic_file.h"
#include "validate/prompt_suite.h"

namespace tq::validate {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

GuardOptions cell_guard(const CellSpec& c) {
  GuardOptions g;
  if (c.mode != CellMode::Mid || c.mid_trigger != "organic") return g;
  g.enabled = true;
  g.mid_prefill = true;
  g.owner = "validate:" + c.name;
  if (!c.guard_limit.empty()) {
    auto l = MemoryLimit::parse(c.guard_limit);
    if (!l) fail("cell {}: bad guard limit '{}'", c.name, c.guard_limit);
    g.config.limit = *l;
  }
  g.config.chunk = c.chunk;
  g.config.min_chunk = std::min<int64_t>(64, c.chunk);
  g.config.slice_tokens = c.slice_tokens;
  return g;
}

std::vector<float> read_floats(const std::filesystem::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("{}: missing (the dense cell must run first)", p.string());
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  if (size_t(in.gcount()) != n * sizeof(float)) fail("{}: truncated", p.string());
  return v;
}

nlohmann::json conversion_json(const GenerateResult& r) {
  if (!r.converted) return nullptr;
  return {{"trigger", r.conversion_trigger}, {"at_token", r.conversion.at_token},
          {"layers", r.conversion.layers},   {"slices", r.conversion.slices},
          {"seconds", r.conversion.seconds}, {"dense_bytes", r.conversion.dense_bytes},
          {"compressed_bytes", r.conversion.compressed_bytes}};
}

}  // namespace

KvPolicy cell_kv_policy(const CellSpec& c, const ModelConfig& cfg) {
  KvPolicy p;
  if (c.mode == CellMode::Dense) return p;
  p.mode = KvPolicy::Mode::TurboQuant;
  p.format.head_dim = int(cfg.head_dim);
  p.format.key_width = quant::QuantWidth::parse(c.k_bits);
  p.format.value_width = quant::QuantWidth::parse(c.v_bits);
  p.format.validate();
  p.keep_dense = parse_layer_list(c.keep_dense, int(cfg.n_layer));
  p.slice_tokens = c.slice_tokens;
  return p;
}

void log_softmax(const float* row, int64_t vocab, float* out) {
  double mx = *std::max_element(row, row + vocab), se = 0;
  for (int64_t v = 0; v < vocab; ++v) se += std::exp(double(row[v]) - mx);
  const double lse = mx + std::log(se);
  for (int64_t v = 0; v < vocab; ++v) out[v] = float(double(row[v]) - lse);
}

double mean_kl_rows(const float* p, const float* q, int64_t n, int64_t vocab) {
  if (n == 0) return 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      double lp = p[i * vocab + v];
      kl += std::exp(lp) * (lp - double(q[i * vocab + v]));
    }
    total += std::max(kl, 0.0);
  }
  return total / double(n);
}

void run_cell(const CellJob& job, Backend& be) {
  const CellSpec& c = job.cell;
  auto model = Model::load(job.model_dir, be);
  const ModelConfig& cfg = model->config();
  const int64_t V = cfg.vocab_size;
  PromptSuite suite = PromptSuite::from_json(read_json_file(job.run_dir / "suite.json"));
  KvPolicy policy = cell_kv_policy(c, cfg);
  GuardOptions guard = cell_guard(c);
  reset_peak_rss();
  std::filesystem::create_directories(job.run_dir / "dense_logp");

  nlohmann::json out;
  out["cell"] = c.to_json();
  out["pid"] = ::getpid();
  double prefill_tokens = 0, prefill_s = 0, suffix_tokens = 0, suffix_s = 0, decode_tokens = 0,
         decode_s = 0, nll_sum = 0, kl_sum = 0, conv_s = 0;
  int64_t positions = 0, agree = 0;
  Sha256 greedy;
  nlohmann::json docs = nlohmann::json::array(), events = nlohmann::json::array();
  uint64_t kv_peak = 0, backend_max = 0;  // backend bytes after each pass: weights, kept workspaces
  const auto sample_backend = [&] { backend_max = std::max<uint64_t>(backend_max, be.allocated_bytes()); };
  for (const TextDoc& d : suite.texts) {
    const int64_t P = d.prompt_tokens, n = int64_t(d.ids.size()), B = P / 2;
    // 1. Serving path: prefill the prompt, then greedy decode.
    GenerateOptions g;
    g.max_tokens = c.decode_tokens;
    g.ignore_eos = true;
    g.eos_ids = cfg.eos_token_ids;
    g.prefill_chunk = c.chunk;
    g.kv = policy;
    g.kv.convert_at = c.mode == CellMode::Mid && c.mid_trigger == "forced" ? B : 0;
    g.guard = guard;
    g.suffix_from = B;
    const int64_t t_start = steady_ns();
    GenerateResult gr = generate(*model, std::span<const int32_t>(d.ids.data(), size_t(P)), g);
    if (gr.error.failed()) fail("{}: {}", d.name, gr.error.message);
    prefill_tokens += double(P);
    prefill_s += gr.prefill_seconds;
    suffix_tokens += double(P - B);
    suffix_s += gr.suffix_seconds;
    decode_tokens += double(std::max<size_t>(gr.ids.size(), 1) - 1);
    decode_s += gr.decode_seconds;
    greedy.update(gr.ids.data(), gr.ids.size() * sizeof(int32_t));
    kv_peak = std::max<uint64_t>(kv_peak, gr.kv_peak_bytes);
    sample_backend();
    if (gr.converted) {
      conv_s += gr.conversion.seconds;
      double before = 0;  // time of the chunks that ran before the conversion point
      for (const auto& ch : gr.chunks)
        if (ch.begin + ch.n <= gr.conversion.at_token) before += ch.seconds;
      events.push_back({{"doc", d.name},
                        {"t_ns", t_start + int64_t(before * 1e9)},
                        {"at_token", gr.conversion.at_token},
                        {"trigger", gr.conversion_trigger}});
    }
    // 2. Quality: teacher-forced continuation on a cache in the same mode.
    ScoreOptions so;
    so.chunk = c.chunk;
    so.kv = policy;
    so.kv.convert_at = c.mode == CellMode::Ordinary ? P : c.mode == CellMode::Mid && c.mid_trigger == "forced" ? B : 0;
    so.guard = guard;
    const int64_t rows = n - P;  // positions P-1 .. n-2 predict the continuation
    std::vector<float> logp(size_t(rows * V));
    so.logits_from = P - 1;  // the other rows' NLL and argmax come from the backend
    so.on_logits = [&](int64_t pos, const float* row) {
      if (pos >= P - 1 && pos < n - 1) log_softmax(row, V, logp.data() + (pos - P + 1) * V);
    };
    ScoreResult sr = score(*model, d.ids, so);
    if (sr.error.failed()) fail("{}: {}", d.name, sr.error.message);
    sample_backend();
    double nll = 0;
    for (int64_t pos = P - 1; pos < n - 1; ++pos) nll += sr.nll[size_t(pos)];
    nll_sum += nll;
    const auto dense_file = job.run_dir / "dense_logp" / (d.name + ".bin");
    double kl = 0;
    int64_t doc_agree = 0;
    if (c.mode == CellMode::Dense) {
      write_file_atomic(dense_file, std::string(reinterpret_cast<const char*>(logp.data()),
                                                logp.size() * sizeof(float)));
      doc_agree = rows;
    } else {
      std::vector<float> ref = read_floats(dense_file, logp.size());
      kl = mean_kl_rows(ref.data(), logp.data(), rows, V);
      for (int64_t i = 0; i < rows; ++i) {
        const float* a = ref.data() + i * V;
        const float* b = logp.data() + i * V;
        doc_agree += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
      }
    }
    kl_sum += kl * double(rows);
    agree += doc_agree;
    positions += rows;
    docs.push_back({{"name", d.name},
                    {"prompt_tokens", P},
                    {"boundary", B},
                    {"prefill_seconds", gr.prefill_seconds},
                    {"suffix_seconds", gr.suffix_seconds},
                    {"decode_seconds", gr.decode_seconds},
                    {"mean_nll", nll / double(rows)},
                    {"kl", kl},
                    {"conversion", conversion_json(gr)}});
  }
  // 3. Retrieval: needle documents, the question part on the cell's cache.
  int64_t hits = 0, total = 0;
  for (const NeedleDoc& d : suite.needles) {
    ScoreOptions so;
    so.chunk = c.chunk;
    so.kv = policy;
    so.kv.convert_at = c.mode == CellMode::Ordinary ? d.query_start
                       : c.mode == CellMode::Mid && c.mid_trigger == "forced" ? d.query_start / 2 : 0;
    so.guard = guard;
    ScoreResult sr = score(*model, d.ids, so);
    if (sr.error.failed()) fail("{}: {}", d.name, sr.error.message);
    for (auto [s, e] : d.spans) {
      bool ok = true;
      for (int32_t q = s - 1; q <= e - 2; ++q) ok = ok && sr.argmax[size_t(q)] == d.ids[size_t(q + 1)];
      hits += ok;
      ++total;
    }
  }
  auto mem = read_process_memory();
  out["docs"] = docs;
  out["conversion_events"] = events;
  out["prefill_tokens_per_s"] = prefill_tokens / std::max(prefill_s, 1e-9);
  out["suffix_tokens_per_s"] = suffix_tokens / std::max(suffix_s, 1e-9);
  out["decode_tokens_per_s"] = decode_tokens / std::max(decode_s, 1e-9);
  out["prefill_seconds"] = prefill_s;
  out["conversion_seconds"] = conv_s;
  out["mean_nll"] = positions ? nll_sum / double(positions) : 0.0;
  out["mean_kl"] = positions ? kl_sum / double(positions) : 0.0;
  out["top1"] = positions ? double(agree) / double(positions) : 1.0;
  out["greedy_hash"] = greedy.finish_hex().substr(0, 16);
  out["needles"] = hits;
  out["needles_total"] = total;
  out["kv_peak_bytes"] = kv_peak;
  out["child_peak_rss_bytes"] = mem ? mem->peak_bytes : 0;
  out["backend"] = be.name();
  out["backend_bytes_max"] = backend_max;
  out["weight_bytes"] = model->weight_bytes();
  if (!docs.empty() && !docs[0]["conversion"].is_null()) out["conversion"] = docs[0]["conversion"];
  else out["conversion"] = nullptr;
  write_file_atomic(job.result, out.dump(1));
}

const char* cell_mode_name(CellMode m) {
  switch (m) {
    case CellMode::Dense: return "dense";
    case CellMode::Ordinary: return "ordinary";
    case CellMode::Mid: return "mid";
  }
  return "?";
}

nlohmann::json CellSpec::to_json() const {
  return {{"name", name},           {"mode", cell_mode_name(mode)}, {"k_bits", k_bits},
          {"v_bits", v_bits},       {"mid_trigger", mid_trigger},   {"guard_limit", guard_limit},
          {"keep_dense", keep_dense}, {"slice_tokens", slice_tokens}, {"chunk", chunk},
          {"decode_tokens", decode_tokens}, {"device", device}};
}

CellSpec CellSpec::from_json(const nlohmann::json& j) {
  CellSpec c;
  try {
    c.name = j.at("name").get<std::string>();
    std::string m = j.at("mode").get<std::string>();
    c.mode = m == "dense" ? CellMode::Dense : m == "ordinary" ? CellMode::Ordinary : CellMode::Mid;
    c.k_bits = j.at("k_bits").get<double>();
    c.v_bits = j.at("v_bits").get<double>();
    c.mid_trigger = j.at("mid_trigger").get<std::string>();
    c.guard_limit = j.at("guard_limit").get<std::string>();
    c.keep_dense = j.at("keep_dense").get<std::string>();
    c.slice_tokens = j.at("slice_tokens").get<int64_t>();
    c.chunk = j.at("chunk").get<int64_t>();
    c.decode_tokens = j.at("decode_tokens").get<int64_t>();
    c.device = j.value("device", std::string("cpu"));  // journals from before the flag ran on the CPU
  } catch (const nlohmann::json::exception& e) {
    fail("cell spec: {}", e.what());
  }
  return c;
}

nlohmann::json CellJob::to_json() const {
  return {{"cell", cell.to_json()},
          {"model_dir", model_dir.string()},
          {"run_dir", run_dir.string()},
          {"result", result.string()}};
}

CellJob CellJob::from_json(const nlohmann::json& j) {
  CellJob job;
  try {
    job.cell = CellSpec::from_json(j.at("cell"));
    job.model_dir = j.at("model_dir").get<std::string>();
    job.run_dir = j.at("run_dir").get<std::string>();
    job.result = j.at("result").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("cell job: {}", e.what());
  }
  return job;
}

}  // namespace tq::validate
