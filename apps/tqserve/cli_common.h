// Helpers shared by the subcommands: loading a model with progress, reading id lists.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/device_support.h"
#include "engine/generate.h"
#include "kv/kv_policy.h"
#include "model/model.h"

namespace tq::app {

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  double load_seconds = 0;
};

// The backend of `device`: the CPU backend ("cpu") or the CUDA backend on GPU 0 ("cuda"); throws
// Error (check_device's) when that device cannot run here.
std::unique_ptr<Backend> make_backend(const std::string& device);
// Loads a model directory on the CPU backend (device "cpu") or the CUDA backend ("cuda", GPU 0),
// with a progress line on a terminal.
LoadedModel load_model(const std::filesystem::path& dir, const std::string& device = "cpu");
// --device cpu|cuda (generate, score, serve). cuda: one CUDA backend per model on GPU 0; a KV
// policy the GPU cannot keep on the device is refused when the model loads (check_backend_kv).
void add_device_option(CLI::App* cmd, std::string& device);
// Throws Error when `device` cannot run here (cuda without a GPU or in a build without CUDA).
void check_device(const std::string& device);

// Parses "1,2,3" or "1 2 3" (commas and/or whitespace); throws Error on anything else.
std::vector<int32_t> parse_ids(const std::string& text);

// EOS ids: config.json's eos_token_id plus generation_config.json's, deduplicated.
std::vector<int32_t> eos_ids(const std::filesystem::path& dir, const ModelConfig& cfg);

// The KV options of generate, score and serve.
struct KvArgs {
  std::string kv = "dense";     // dense | turboquant
  double k_bits = 4, v_bits = 4;
  std::string keep_dense;       // layer list: "0,3", "last", "first,last"
  int64_t convert_at = 0;
  int64_t slice = 8192;
  std::string rotation = "hadamard";
  int64_t recent = 128;
  std::string norm_correction = "on";
};
void add_kv_options(CLI::App* cmd, KvArgs& args);
// Validates the options against the model (layers, head_dim): throws Error naming the flag.
KvPolicy make_kv_policy(const KvArgs& args, const ModelConfig& cfg);

// Memory guard and turboquant.enabled / turboquant.mid_prefill options (generate, score), and
// a JSON config file with the same settings (flags given on the command line win).
struct GuardArgs {
  std::string config_file;
  std::string turboquant;         // "on" / "off" / "" (then --kv decides)
  std::string mid_prefill = "off";
  bool guard = false;             // --memory-guard: guard without a limit (host headroom only)
  std::string mem_limit;          // "2G", "75%", "" (none)
  std::string min_headroom;       // "512M", "" (none)
  std::string gpu_mem_limit;      // --device cuda: "100G", "90%", "" (the device's total minus a reserve)
  double soft = 0.85, hard = 0.95;
  int64_t min_chunk = 64;
  int sustained = 3;
};
void add_guard_options(CLI::App* cmd, GuardArgs& args);
// Reads args.config_file (when set) into the options that were not given on the command line;
// throws Error naming the file and key on a bad value.
void apply_config_file(CLI::App* cmd, KvArgs& kv, GuardArgs& g);
// turboquant.enabled from --turboquant (else --kv); mid_prefill is kept even while the parent
// is off (it is then inert).
TurboQuantSwitches make_switches(const KvArgs& kv, const GuardArgs& g);
// The guard of generate/score/serve: enabled by --memory-guard, --mem-limit, --gpu-mem-limit or
// --min-host-headroom. On device "cuda" it counts GPU memory against --gpu-mem-limit (--mem-limit,
// a host limit, is refused there); --gpu-mem-limit needs "cuda".
GuardOptions make_guard_options(const GuardArgs& g, const KvArgs& kv, int64_t prefill_chunk,
                                const std::string& device = "cpu");
// The settings as JSON (for --json output and the validation report).
nlohmann::json settings_json(const GuardArgs& g, const KvArgs& kv, const GuardOptions& go);
// A RequestError as an OpenAI-style error object; exit code 75 (EX_TEMPFAIL) when retryable.
nlohmann::json error_json(const RequestError& e);
int error_exit_code(const RequestError& e);
// The conversion (null when none ran) and the guard's report, for --json output.
nlohmann::json conversion_json(bool converted, const ConversionStats& c, const std::string& trigger);
nlohmann::json guard_json(const GuardReport& g);

}  // namespace tq::app
