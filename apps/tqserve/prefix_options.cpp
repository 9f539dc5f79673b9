// Prefix-cache flags of `tqserve serve`, and the identity its blocks are keyed by.
#include "apps/tqserve/prefix_options.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/memory_probe.h"
#include "io/file.h"
#include "io/sha256.h"
#include "kv/block_codec.h"

namespace tq::app {

namespace fs = std::filesystem;

void add_prefix_options(CLI::App* c, PrefixArgs& a) {
  c->add_flag("--no-prefix-cache", a.disabled, "Do not reuse cached prompt prefixes");
  c->add_option("--prefix-cache-ram", a.ram, "Bytes of prefix-cache blocks kept in RAM (e.g. 512M, 1G)")
      ->capture_default_str();
  c->add_option("--prefix-cache-dir", a.dir,
                "Directory for prefix-cache blocks on disk (kept across restarts; one model per directory)");
  c->add_option("--prefix-cache-disk", a.disk, "Bytes of prefix-cache blocks kept in --prefix-cache-dir")
      ->capture_default_str();
  c->add_option("--prefix-block", a.block, "Tokens per prefix-cache block")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(16), int64_t(1) << 16));
}

std::string prefix_identity(const fs::path& model_dir, const Model& model, const KvPolicy& kv,
                            int64_t prefill_chunk) {
  std::string id = std::string("tqserve ") + TQ_VERSION + "\n";
  id += std::string("backend ") + model.backend().name() + "\n";
  id += "config.json sha256 " + sha256_file(model_dir / "config.json") + "\n";
  // Weights by name, size and modification time: hashing gigabytes at every start would cost
  // more than the cache saves; a rewritten file gets a new time.
  std::vector<std::string> weights;
  for (const auto& e : fs::directory_iterator(model_dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 12 || name.substr(name.size() - 12) != ".safetensors") continue;
    auto t = e.last_write_time().time_since_epoch().count();
    weights.push_back(name + " " + std::to_string(e.file_size()) + " " + std::to_string(t));
  }
  std::sort(weights.begin(), weights.end());
  for (const auto& w : weights) id += "weights " + w + "\n";
  id += "kv " + (kv.turboquant() ? kv.describe() : std::string("dense")) + "\n";
  id += "prefill_chunk " + std::to_string(prefill_chunk) + "\n";
  id += "layout\n" + kv_format_id(model.new_cache());
  return id;
}

std::shared_ptr<PrefixCache> make_prefix_cache(const PrefixArgs& a, const fs::path& model_dir,
                                               const Model& model, const KvPolicy& kv,
                                               int64_t prefill_chunk) {
  if (a.disabled) return nullptr;
  PrefixCacheConfig c;
  c.block_tokens = a.block;
  auto ram = parse_byte_size(a.ram);
  if (!ram) fail("--prefix-cache-ram: '{}' is not a size (e.g. 512M, 1G)", a.ram);
  c.ram_bytes = *ram;
  if (!a.dir.empty()) {
    auto disk = parse_byte_size(a.disk);
    if (!disk) fail("--prefix-cache-disk: '{}' is not a size (e.g. 10G)", a.disk);
    c.dir = a.dir;
    c.disk_bytes = *disk;
    c.writer_queue_bytes = std::min<uint64_t>(c.writer_queue_bytes, std::max<uint64_t>(c.ram_bytes, 1 << 20));
  }
  auto pc = PrefixCache::create(c, prefix_identity(model_dir, model, kv, prefill_chunk));
  if (pc->ssd()) {
    const SsdScanReport& r = pc->ssd()->scan_report();
    std::fprintf(stderr,
                 "tqserve: prefix cache: %lld blocks on disk in %s (%lld unusable files removed, "
                 "%lld over the bound)\n",
                 (long long)r.kept, a.dir.c_str(), (long long)r.removed, (long long)r.evicted);
  }
  return pc;
}

}  // namespace tq::app
