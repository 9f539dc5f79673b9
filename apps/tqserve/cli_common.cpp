// Shared CLI helpers.
#include "apps/tqserve/cli_common.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/file.h"

namespace tq::app {

LoadedModel load_model(const std::filesystem::path& dir) {
  LoadedModel m;
  auto t0 = std::chrono::steady_clock::now();
  m.backend = make_cpu_backend();
  std::unique_ptr<Progress> progress;  // created once the tensor count is known
  m.model = Model::load(dir, *m.backend, [&](int64_t done, int64_t total) {
    if (!progress) progress = std::make_unique<Progress>("loading " + dir.filename().string(), total);
    progress->update(done);
  });
  m.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    if (text[j] == '-') ++j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i || (j == i + 1 && text[i] == '-'))
      fail("token ids: unexpected '{}' at offset {} (expected integers separated by commas or "
           "whitespace)", c, i);
    if (j - i > 10) fail("token ids: '{}' at offset {} is out of range", text.substr(i, j - i), i);
    long long v = std::stoll(text.substr(i, j - i));
    if (v < 0 || v > INT32_MAX) fail("token ids: {} at offset {} is out of range", v, i);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

std::vector<int32_t> eos_ids(const std::filesystem::path& dir, const ModelConfig& cfg) {
  std::vector<int32_t> ids = cfg.eos_token_ids;
  auto gen = dir / "generation_config.json";
  if (std::filesystem::exists(gen)) {
    nlohmann::json j = read_json_file(gen);
    auto e = j.find("eos_token_id");
    if (e != j.end()) {
      if (e->is_number_integer()) ids.push_back(e->get<int32_t>());
      if (e->is_array())
        for (const auto& v : *e)
          if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void add_kv_options(CLI::App* c, KvArgs& a) {
  c->add_option("--kv", a.kv, "KV cache format: dense or turboquant")
      ->capture_default_str()
      ->check(CLI::IsMember({"dense", "turboquant"}));
  c->add_option("--k-bits", a.k_bits, "TurboQuant key bits: 1-8, or 2.5 / 3.5")->capture_default_str();
  c->add_option("--v-bits", a.v_bits, "TurboQuant value bits: 1-8, or 2.5 / 3.5")->capture_default_str();
  c->add_option("--kv-keep-dense", a.keep_dense,
                "Full-attention layers kept dense under TurboQuant, e.g. 0,5 or first,last");
  c->add_option("--kv-convert-at", a.convert_at,
                "Convert the cache to TurboQuant once it holds N tokens, mid-prefill (0: after "
                "the prompt)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--kv-slice", a.slice, "Tokens per conversion step (bounds conversion memory)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--kv-rotation", a.rotation, "TurboQuant rotation: hadamard or haar")
      ->capture_default_str()
      ->check(CLI::IsMember({"hadamard", "haar"}));
}

KvPolicy make_kv_policy(const KvArgs& a, const ModelConfig& cfg) {
  KvPolicy p;
  if (a.kv == "dense") {
    if (a.convert_at > 0) fail("--kv-convert-at needs --kv turboquant");
    return p;
  }
  p.mode = KvPolicy::Mode::TurboQuant;
  p.format.head_dim = int(cfg.head_dim);
  p.format.key_width = with_context("--k-bits", [&] { return quant::QuantWidth::parse(a.k_bits); });
  p.format.value_width =
      with_context("--v-bits", [&] { return quant::QuantWidth::parse(a.v_bits); });
  auto rot = a.rotation == "haar" ? quant::RotationKind::Haar : quant::RotationKind::Hadamard;
  p.format.key_rotation = p.format.value_rotation = rot;
  with_context("TurboQuant format", [&] { p.format.validate(); });
  p.keep_dense = with_context("--kv-keep-dense",
                              [&] { return parse_layer_list(a.keep_dense, int(cfg.n_layer)); });
  p.convert_at = a.convert_at;
  p.slice_tokens = a.slice;
  return p;
}

}  // namespace tq::app
