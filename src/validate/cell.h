// A validation cell: one mode (dense, ordinary TurboQuant, mid-prefill TurboQuant) at one width,
// its spec (what the supervised child runs) and run_cell(), the child's whole job.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "kv/kv_policy.h"
#include "model/model_config.h"

namespace tq::validate {

enum class CellMode : uint8_t { Dense, Ordinary, Mid };
const char* cell_mode_name(CellMode m);

struct CellSpec {
  std::string name;  // "dense", "ordinary-q4", "mid-q8", ...
  CellMode mode = CellMode::Dense;
  double k_bits = 4, v_bits = 4;
  std::string mid_trigger = "forced";  // forced (at the boundary) or organic (the memory guard)
  std::string guard_limit;             // organic: the guard's --mem-limit
  std::string keep_dense;              // layer list kept dense
  int64_t slice_tokens = 8192;
  int64_t chunk = 512;
  int64_t decode_tokens = 32;
  std::string device = "cpu";  // where the child runs the model: cpu or cuda (GPU 0)
  nlohmann::json to_json() const;
  static CellSpec from_json(const nlohmann::json& j);
};

// Everything the child needs, written by the parent as one JSON file.
struct CellJob {
  CellSpec cell;
  std::filesystem::path model_dir;
  std::filesystem::path run_dir;    // suite.json, dense_logp/, cells/ live here
  std::filesystem::path result;     // where the child writes its result JSON (atomically)
  nlohmann::json to_json() const;
  static CellJob from_json(const nlohmann::json& j);
};

// The child: loads the model and the suite, runs every document in the cell's mode and writes
// the result JSON (metrics, conversion details, memory). The dense cell also stores the
// continuation log-probabilities the other cells' KL is measured against. Throws Error on
// failure (the child then exits non-zero). `be` is the backend of job.cell.device (the caller
// makes it: backends are chosen above this layer).
void run_cell(const CellJob& job, Backend& be);

// The KV policy a cell runs with: dense, or TurboQuant at the cell's widths, kept-dense layers
// and conversion slice (the trigger is set per document).
KvPolicy cell_kv_policy(const CellSpec& c, const ModelConfig& cfg);

// Mean KL(p || q) of log-probability rows over `n` rows of `vocab` (the dense file's layout).
double mean_kl_rows(const float* logp_dense, const float* logp_mode, int64_t n, int64_t vocab);
// Writes log-softmax(row) into out[vocab].
void log_softmax(const float* row, int64_t vocab, float* out);

}  // namespace tq::validate
