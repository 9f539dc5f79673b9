// The validation runner (`tqserve validate`): the matrix of modes, each cell supervised in a
// child process, model-file hashes before/after, a resumable journal, the quality bars of
// ../shared/docs/turboquant.md as checks, and the JSON / table / HTML reports.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "validate/cell.h"
#include "validate/prompt_suite.h"

namespace tq::validate {

struct ValidateOptions {
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  std::vector<std::pair<double, double>> widths = {{8, 8}, {4, 4}};  // K/V bits
  bool ordinary = true, mid = true;  // which TurboQuant modes run (dense always runs)
  SuiteOptions suite;
  int64_t chunk = 512;
  int64_t decode_tokens = 32;
  int64_t slice_tokens = 8192;
  std::string keep_dense;
  std::string device = "cpu";          // where the cells run the model: cpu or cuda (GPU 0)
  std::string gpu;                     // cuda: the GPU, as cuda_device_summary() names it
  std::string mid_trigger = "forced";  // forced (at half of each prompt) or organic
  std::string guard_limit;             // organic mid cells: the child's guard limit
  uint64_t cell_memory_limit = 0;      // child RSS limit (0: none)
  uint64_t min_host_headroom = 0;      // host MemAvailable floor while a cell runs (0: none)
  double cell_timeout_s = 0;
  bool resume = false;
  std::filesystem::path exe;           // this binary (the cells' child processes)
  std::string version;
  bool quiet = false;                  // no progress lines on stderr
};

// The matrix in run order: dense first (every other cell's KL is measured against it).
std::vector<CellSpec> plan_cells(const ValidateOptions& opt);

// sha256 of every *.safetensors file (and config.json) of a model folder, by file name: the
// files hashed in parallel (one thread each, at most one per core). Throws Error naming a file
// that cannot be read.
nlohmann::json hash_model_files(const std::filesystem::path& dir);

// The generator a model folder's first shard names in its safetensors metadata when `tqserve
// make-model` wrote it (random weights), else "". Throws Error when the shard cannot be read.
std::string model_generator(const std::filesystem::path& dir);

// The machine this runs on: host name, kernel, CPU model and count, memory; the backend the
// cells use ("cpu" or "cuda") and the GPU's description when given.
nlohmann::json machine_info(const std::string& device = "cpu", const std::string& gpu = "");

// The quality bars as checks over the report's cells: [{name, cell, ok, detail}].
nlohmann::json evaluate_checks(const nlohmann::json& cells);

// Runs (or resumes) a validation; writes report.json, report.md and report.html into out_dir;
// returns the process exit code: 0 when every check passed, 1 otherwise. Throws Error on
// setup failures (unreadable model, a journal that belongs to another run).
int run_validation(const ValidateOptions& opt);

}  // namespace tq::validate
