// `tqserve make-model`: writes a random-weight model of a real architecture's shapes as a normal
// Hugging Face directory (config.json, bf16 safetensors shards + index, tokenizer files copied from
// a fixture), so that full-size benchmarks need no downloads. Weights are deterministic per seed.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "apps/tqserve/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/file.h"

namespace tq::app {
namespace {

namespace fs = std::filesystem;

struct Preset {
  const char* name;
  int64_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, max_pos;
  bool tied;
};

// Shapes of the published Qwen3 dense models (config.json of each), plus a tiny one for tests.
constexpr Preset kPresets[] = {
    {"qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, 40960, false},
    {"qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936, 40960, true},
    {"qwen3-1.7b", 28, 2048, 16, 8, 128, 6144, 151936, 40960, true},
    {"qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, 40960, true},
    {"tiny", 2, 256, 4, 2, 64, 512, 8192, 4096, false},
    {"tiny-tied", 2, 256, 4, 2, 64, 512, 8192, 4096, true},
};

struct MakeArgs {
  std::string like, out, tokenizer_from;
  bool random = false, force = false;
  uint64_t seed = 0;
  int threads = 0;
  int64_t layers = 0, vocab = 0;
  double shard_gb = 4.0;
};

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  float bound = 0.0f;  // uniform in [-bound, bound]; 0: constant 1 (norm weights)
  int shard = 0;
  uint64_t offset = 0;  // byte offset in its shard's data section
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Uniform with standard deviation `std`: bound = std * sqrt(3).
float uniform_bound(double std) { return float(std * std::sqrt(3.0)); }

// Init that keeps activations finite through every layer: 1/sqrt(fan_in) for the input
// projections, the two residual-branch outputs further scaled by 1/sqrt(2 * layers); embeddings
// and the LM head 1/sqrt(hidden), so logits are O(1) and a tied head does not just echo the
// input token (the residual stream is then dominated by the layers, not the embedding).
std::vector<Tensor> tensor_list(const Preset& p) {
  std::vector<Tensor> t;
  const double res = 1.0 / std::sqrt(2.0 * double(p.layers));
  const int64_t q = p.heads * p.head_dim, kv = p.kv_heads * p.head_dim;
  t.push_back({"model.embed_tokens.weight", {p.vocab, p.hidden}, uniform_bound(1.0 / std::sqrt(double(p.hidden)))});
  for (int64_t i = 0; i < p.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const double in = 1.0 / std::sqrt(double(p.hidden));
    t.push_back({l + "input_layernorm.weight", {p.hidden}, 0.0f});
    t.push_back({l + "self_attn.q_proj.weight", {q, p.hidden}, uniform_bound(in)});
    t.push_back({l + "self_attn.k_proj.weight", {kv, p.hidden}, uniform_bound(in)});
    t.push_back({l + "self_attn.v_proj.weight", {kv, p.hidden}, uniform_bound(in)});
    t.push_back({l + "self_attn.q_norm.weight", {p.head_dim}, 0.0f});
    t.push_back({l + "self_attn.k_norm.weight", {p.head_dim}, 0.0f});
    t.push_back({l + "self_attn.o_proj.weight", {p.hidden, q}, uniform_bound(res / std::sqrt(double(q)))});
    t.push_back({l + "post_attention_layernorm.weight", {p.hidden}, 0.0f});
    t.push_back({l + "mlp.gate_proj.weight", {p.intermediate, p.hidden}, uniform_bound(in)});
    t.push_back({l + "mlp.up_proj.weight", {p.intermediate, p.hidden}, uniform_bound(in)});
    t.push_back({l + "mlp.down_proj.weight", {p.hidden, p.intermediate},
                 uniform_bound(res / std::sqrt(double(p.intermediate)))});
  }
  t.push_back({"model.norm.weight", {p.hidden}, 0.0f});
  if (!p.tied)
    t.push_back({"lm_head.weight", {p.vocab, p.hidden}, uniform_bound(1.0 / std::sqrt(double(p.hidden)))});
  return t;
}

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t name_hash(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ mix64(seed);
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return mix64(h);
}

// Element i of a tensor depends only on (seed, name, i): any thread count gives the same bytes.
void fill_bf16(const Tensor& t, uint64_t key, int64_t begin, int64_t n, uint16_t* out) {
  if (t.bound == 0.0f) {
    std::fill(out, out + n, f32_to_bf16(1.0f));
    return;
  }
  for (int64_t i = 0; i < n; i += 2) {  // two 32-bit uniforms per 64-bit hash
    const uint64_t r = mix64(key + uint64_t(begin + i));
    const float u0 = float(uint32_t(r)) * 2.3283064e-10f, u1 = float(uint32_t(r >> 32)) * 2.3283064e-10f;
    out[i] = f32_to_bf16((2.0f * u0 - 1.0f) * t.bound);
    if (i + 1 < n) out[i + 1] = f32_to_bf16((2.0f * u1 - 1.0f) * t.bound);
  }
}

std::string shard_name(int i, int n) {
  if (n == 1) return "model.safetensors";
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%05d.safetensors", i + 1, n);
  return b;
}

nlohmann::json config_json(const Preset& p, const nlohmann::json& ids) {
  nlohmann::ordered_json c;
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = ids.value("bos_token_id", nlohmann::json(nullptr));
  c["eos_token_id"] = ids.value("eos_token_id", nlohmann::json(nullptr));
  c["head_dim"] = p.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = p.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = p.intermediate;
  c["max_position_embeddings"] = p.max_pos;
  c["max_window_layers"] = p.layers;
  c["model_type"] = "qwen3";
  c["num_attention_heads"] = p.heads;
  c["num_hidden_layers"] = p.layers;
  c["num_key_value_heads"] = p.kv_heads;
  c["rms_norm_eps"] = 1e-6;
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = 1000000.0;
  c["sliding_window"] = nullptr;
  c["tie_word_embeddings"] = p.tied;
  c["torch_dtype"] = "bfloat16";
  c["use_cache"] = true;
  c["use_sliding_window"] = false;
  c["vocab_size"] = p.vocab;
  return nlohmann::json::parse(c.dump());
}

void write_text(const fs::path& path, const std::string& s) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", path.string(), std::strerror(errno));
  const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  if (std::fclose(f) != 0 || !ok) fail("{}: write failed: {}", path.string(), std::strerror(errno));
}

// The largest token id the tokenizer can produce, +1 (vocab entries and added tokens).
int64_t tokenizer_vocab(const fs::path& tok) {
  nlohmann::json j = read_json_file(tok);
  int64_t n = 0;
  if (j.contains("model") && j["model"].contains("vocab") && j["model"]["vocab"].is_object())
    for (const auto& [k, v] : j["model"]["vocab"].items())
      if (v.is_number_integer()) n = std::max<int64_t>(n, v.get<int64_t>() + 1);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"])
      if (a.contains("id") && a["id"].is_number_integer()) n = std::max<int64_t>(n, a["id"].get<int64_t>() + 1);
  return n;
}

// The fixture's tokenizer.json, with vocab entries "<|extra_NNNNNN|>" for ids [have, vocab) when
// the model's vocab is larger: every id the model can sample then decodes (to that text). No
// merge produces them, so encoding is unchanged. Zero-padded so that name order is id order.
void write_tokenizer(const fs::path& from, const fs::path& to, int64_t have, int64_t vocab) {
  if (have >= vocab) {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    return;
  }
  nlohmann::json j = read_json_file(from);  // std::map objects: 150K inserts stay fast
  auto& v = j["model"]["vocab"];
  if (!v.is_object()) fail("{}: model.vocab is not an object: cannot extend it to {} ids", from.string(), vocab);
  char name[32];
  for (int64_t id = have; id < vocab; ++id) {
    std::snprintf(name, sizeof name, "<|extra_%06lld|>", (long long)id);
    v[name] = id;
  }
  write_text(to, j.dump());
}

fs::path default_tokenizer_dir() {
  for (fs::path d : {fs::path("models/micro-qwen3"), fs::path(TQ_SOURCE_ROOT) / "models/micro-qwen3"})
    if (fs::exists(d / "tokenizer.json")) return d;
  fail("make-model: no tokenizer fixture found (models/micro-qwen3); pass --tokenizer-from DIR");
}

void run(const MakeArgs& a) {
  if (!a.random) fail("make-model: only random weights are supported: pass --random");
  const Preset* found = nullptr;
  std::string names;
  for (const Preset& p : kPresets) {
    names += std::string(names.empty() ? "" : ", ") + p.name;
    if (a.like == p.name) found = &p;
  }
  if (!found) fail("make-model: unknown --like '{}' (known: {})", a.like, names);
  Preset p = *found;
  if (a.layers > 0) p.layers = a.layers;
  if (a.vocab > 0) p.vocab = a.vocab;
  if (!(a.shard_gb > 0.0)) fail("make-model: --shard-gb must be > 0");

  const fs::path tok_dir = a.tokenizer_from.empty() ? default_tokenizer_dir() : fs::path(a.tokenizer_from);
  if (!fs::exists(tok_dir / "tokenizer.json"))
    fail("make-model: {} has no tokenizer.json", tok_dir.string());
  const int64_t tv = tokenizer_vocab(tok_dir / "tokenizer.json");
  if (tv > p.vocab)
    fail("make-model: the tokenizer in {} has {} ids, more than the model's vocab {}", tok_dir.string(),
         tv, p.vocab);
  nlohmann::json ids = nlohmann::json::object();
  if (fs::exists(tok_dir / "config.json")) {
    nlohmann::json fc = read_json_file(tok_dir / "config.json");
    for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (fc.contains(k)) ids[k] = fc[k];
  }

  const fs::path out(a.out);
  if (fs::exists(out) && !fs::is_directory(out)) fail("make-model: {} exists and is not a directory", a.out);
  if (fs::exists(out) && !fs::is_empty(out) && !a.force)
    fail("make-model: {} is not empty (pass --force to overwrite)", a.out);
  fs::create_directories(out);

  // Layout: tensors in order, a new shard when the current one would pass --shard-gb.
  std::vector<Tensor> ts = tensor_list(p);
  const uint64_t limit = uint64_t(a.shard_gb * 1e9);
  std::vector<uint64_t> shard_bytes{0};
  for (Tensor& t : ts) {
    const uint64_t b = uint64_t(t.numel()) * 2;
    if (shard_bytes.back() > 0 && shard_bytes.back() + b > limit) shard_bytes.push_back(0);
    t.shard = int(shard_bytes.size()) - 1;
    t.offset = shard_bytes.back();
    shard_bytes.back() += b;
  }
  const int n_shard = int(shard_bytes.size());
  uint64_t total = 0, params = 0;
  for (uint64_t b : shard_bytes) total += b;
  for (const Tensor& t : ts) params += uint64_t(t.numel());
  const auto space = fs::space(out);
  if (space.available < total + (64u << 20))
    fail("make-model: {} needs {:.2f} GB, only {:.2f} GB free", a.out, double(total) / 1e9,
         double(space.available) / 1e9);

  // Headers first (sizes are known), then the data by many threads with pwrite.
  std::vector<int> fds(static_cast<size_t>(n_shard), -1);
  std::vector<uint64_t> data_start(static_cast<size_t>(n_shard));
  nlohmann::json index;
  index["metadata"] = {{"total_size", total}, {"total_parameters", params}};
  for (int s = 0; s < n_shard; ++s) {
    nlohmann::ordered_json h;
    // The generator, so that tools reading the model (the validation report) can say its weights
    // are random.
    h["__metadata__"] = {{"format", "pt"},
                         {"generator", fmt::format("tqserve make-model --like {} --random --seed {}", a.like, a.seed)}};
    for (const Tensor& t : ts)
      if (t.shard == s) {
        h[t.name] = {{"dtype", "BF16"}, {"shape", t.shape},
                     {"data_offsets", {t.offset, t.offset + uint64_t(t.numel()) * 2}}};
        index["weight_map"][t.name] = shard_name(s, n_shard);
      }
    std::string js = h.dump();
    js.append((8 - js.size() % 8) % 8, ' ');  // data section 8-byte aligned
    const fs::path path = out / shard_name(s, n_shard);
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) fail("{}: cannot create: {}", path.string(), std::strerror(errno));
    fds[size_t(s)] = fd;
    std::string head(8, '\0');
    const uint64_t len = js.size();
    std::memcpy(head.data(), &len, 8);  // little-endian hosts (x86-64, aarch64)
    head += js;
    if (::pwrite(fd, head.data(), head.size(), 0) != ssize_t(head.size()))
      fail("{}: write failed: {}", path.string(), std::strerror(errno));
    data_start[size_t(s)] = head.size();
  }

  struct Chunk {
    size_t tensor;
    int64_t begin, n;
  };
  std::vector<Chunk> chunks;
  constexpr int64_t kChunk = int64_t(8) << 20;  // elements (16 MB of bf16)
  for (size_t i = 0; i < ts.size(); ++i)
    for (int64_t b = 0; b < ts[i].numel(); b += kChunk) chunks.push_back({i, b, std::min(kChunk, ts[i].numel() - b)});
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  std::string err;
  auto worker = [&] {
    std::vector<uint16_t> buf(static_cast<size_t>(kChunk));
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      const Chunk& ch = chunks[c];
      const Tensor& t = ts[ch.tensor];
      fill_bf16(t, name_hash(t.name, a.seed), ch.begin, ch.n, buf.data());
      const uint64_t at = data_start[size_t(t.shard)] + t.offset + uint64_t(ch.begin) * 2;
      const char* src = reinterpret_cast<const char*>(buf.data());
      size_t left = size_t(ch.n) * 2, done = 0;
      while (left > 0) {
        const ssize_t w = ::pwrite(fds[size_t(t.shard)], src + done, left, off_t(at + done));
        if (w <= 0) {
          std::lock_guard<std::mutex> lock(err_mu);
          if (err.empty())
            err = (out / shard_name(t.shard, n_shard)).string() + ": write failed: " + std::strerror(errno);
          next = chunks.size();
          return;
        }
        left -= size_t(w), done += size_t(w);
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  const int n_thr = a.threads > 0 ? a.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int i = 0; i < n_thr; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  for (int s = 0; s < n_shard; ++s)
    if (::close(fds[size_t(s)]) != 0 && err.empty())
      err = (out / shard_name(s, n_shard)).string() + ": close failed: " + std::strerror(errno);
  if (!err.empty()) fail("make-model: {}", err);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (n_shard > 1) write_text(out / "model.safetensors.index.json", index.dump(2) + "\n");
  write_text(out / "config.json", config_json(p, ids).dump(2) + "\n");
  nlohmann::json gen = {{"do_sample", false}};
  for (const auto& [k, v] : ids.items()) gen[k] = v;
  write_text(out / "generation_config.json", gen.dump(2) + "\n");
  for (const char* f : {"tokenizer_config.json", "chat_template.jinja"})
    if (fs::exists(tok_dir / f))
      fs::copy_file(tok_dir / f, out / f, fs::copy_options::overwrite_existing);
  write_tokenizer(tok_dir / "tokenizer.json", out / "tokenizer.json", tv, p.vocab);
  std::printf("wrote %s: %s-shaped, %lld layers, %.3fB parameters, %.2f GB bf16 in %d file(s), "
              "%.1f s (%.2f GB/s, %d threads), seed %llu\n",
              a.out.c_str(), p.name, (long long)p.layers, double(params) / 1e9, double(total) / 1e9,
              n_shard, sec, double(total) / 1e9 / std::max(sec, 1e-9), n_thr,
              (unsigned long long)a.seed);
}

}  // namespace

void add_make_model_command(CLI::App& app) {
  auto a = std::make_shared<MakeArgs>();
  CLI::App* c = app.add_subcommand(
      "make-model", "Write a random-weight model of a real architecture's shapes (HF directory)");
  c->add_option("--like", a->like, "Shape preset: qwen3-8b, qwen3-4b, qwen3-1.7b, qwen3-0.6b, tiny, tiny-tied")
      ->required();
  c->add_flag("--random", a->random, "Random weights (required: the only mode)");
  c->add_option("--out", a->out, "Output directory (created; must be empty unless --force)")->required();
  c->add_option("--seed", a->seed, "Seed of the deterministic weights (default 0)");
  c->add_option("--layers", a->layers, "Override the preset's layer count (e.g. a shallow full-width model)")
      ->check(CLI::Range(int64_t(1), int64_t(1024)));
  c->add_option("--vocab", a->vocab, "Override the preset's vocabulary size (the tokenizer is extended to it)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  c->add_option("--shard-gb", a->shard_gb, "Largest safetensors shard in GB (default 4)");
  c->add_option("--tokenizer-from", a->tokenizer_from,
                "Directory whose tokenizer files are copied (default: models/micro-qwen3)")
      ->check(CLI::ExistingDirectory);
  c->add_option("--threads", a->threads, "Writer threads (default: all cores)")->check(CLI::Range(0, 1024));
  c->add_flag("--force", a->force, "Write into a non-empty output directory");
  c->callback([a] {
    run(*a);
    exit_code = 0;
  });
}

}  // namespace tq::app
