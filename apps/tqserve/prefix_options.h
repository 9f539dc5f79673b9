// The prefix cache's serve flags and the cache they configure: its identity (build, backend,
// model files, KV policy, cache layout, prefill chunk) keys every block (docs/prefix-cache.md).
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kv/kv_policy.h"
#include "kv/prefix_cache.h"
#include "model/model.h"

namespace tq::app {

struct PrefixArgs {
  bool disabled = false;
  std::string ram = "1G";
  std::string dir;
  std::string disk = "10G";
  int64_t block = 256;
};
void add_prefix_options(CLI::App* cmd, PrefixArgs& args);

// Null when disabled. Throws Error on a bad size or an unusable directory. Prints one line
// saying what was found on disk.
std::shared_ptr<PrefixCache> make_prefix_cache(const PrefixArgs& args,
                                               const std::filesystem::path& model_dir,
                                               const Model& model, const KvPolicy& kv,
                                               int64_t prefill_chunk);

// What a block's bytes depend on besides its tokens, as text (hashed into the fingerprint).
std::string prefix_identity(const std::filesystem::path& model_dir, const Model& model,
                            const KvPolicy& kv, int64_t prefill_chunk);

}  // namespace tq::app
