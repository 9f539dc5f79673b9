// Helpers shared by the subcommands: loading a model with progress, reading id lists.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "kv/kv_policy.h"
#include "model/model.h"

namespace tq::app {

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  double load_seconds = 0;
};

// Loads a model directory on the CPU backend, with a progress line on a terminal.
LoadedModel load_model(const std::filesystem::path& dir);

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
};
void add_kv_options(CLI::App* cmd, KvArgs& args);
// Validates the options against the model (layers, head_dim): throws Error naming the flag.
KvPolicy make_kv_policy(const KvArgs& args, const ModelConfig& cfg);

}  // namespace tq::app
