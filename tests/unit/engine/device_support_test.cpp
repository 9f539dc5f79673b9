// The engine on a device backend, without a GPU: a "device" backend that runs the CPU backend's
// ops but reports a device's memory (total, free) and allocations. Checks that the memory guard
// counts the process's device allocations (every registered backend) against the device limit,
// that a KV policy the device cannot keep is refused before any cache exists, and the pool's
// device estimates.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "common/fixtures.h"
#include "engine/device_support.h"
#include "engine/engine_loop.h"
#include "engine/generate.h"
#include "engine/model_pool.h"

namespace tq {
namespace {

constexpr uint64_t GiB = uint64_t(1) << 30;

// The CPU backend's ops behind a device's face: memory_capacity() reports `total` / `free`,
// allocated_bytes() the inner backend's plus `extra` (memory a test says is in use there).
class FakeDevice final : public Backend {
 public:
  explicit FakeDevice(uint64_t total, uint64_t free = 0) : total_(total), free_(free) {}
  uint64_t extra = 0;
  bool tq_on_device = false;

  const char* name() const override { return "fake-device"; }
  void* alloc(size_t n) override { return cpu_->alloc(n); }
  void release(void* p, size_t n) override { cpu_->release(p, n); }
  void upload(void* d, const void* s, size_t n) override { cpu_->upload(d, s, n); }
  void download(void* d, const void* s, size_t n) override { cpu_->download(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { cpu_->copy(d, s, n); }
  size_t allocated_bytes() const override { return cpu_->allocated_bytes() + extra; }
  MemoryCapacity memory_capacity() const override { return {total_, free_}; }
  Weight load_weight(DType src, const void* h, int64_t r, int64_t c) override {
    return cpu_->load_weight(src, h, r, c);
  }
  void embedding(std::span<const int32_t> ids, const Weight& t, float* out) override {
    cpu_->embedding(ids, t, out);
  }
  void rms_norm(const float* x, int64_t rows, const Weight& w, float eps, float* out) override {
    cpu_->rms_norm(x, rows, w, eps, out);
  }
  void linear(const float* x, int64_t T, const Weight& w, float* out, const Weight* b) override {
    cpu_->linear(x, T, w, out, b);
  }
  void rope(float* x, int64_t T, int64_t h, int64_t d, int64_t p, std::span<const float> f) override {
    cpu_->rope(x, T, h, d, p, f);
  }
  void swiglu(const float* g, const float* u, float* out, int64_t n) override { cpu_->swiglu(g, u, out, n); }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(x, y, n); }
  void attention(const AttentionArgs& a) override { cpu_->attention(a); }
  DType kv_dtype() const override { return cpu_->kv_dtype(); }
  void kv_write(const KvStore& d, int64_t at, const float* k, const float* v, int64_t T) override {
    cpu_->kv_write(d, at, k, v, T);
  }
  void kv_read(const KvStore& s, int64_t at, int64_t T, float* k, float* v) override {
    cpu_->kv_read(s, at, T, k, v);
  }
  bool device_turboquant(const quant::VectorCodec&, const quant::VectorCodec&) const override {
    return tq_on_device;
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  uint64_t total_, free_;
};

std::filesystem::path micro() { return test::repo_path("models/micro-qwen3"); }

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = 10 + (i * 7919) % 90;
  return ids;
}

TEST(DeviceSupport, HostBackendIsNotADevice) {
  auto cpu = make_cpu_backend();
  EXPECT_FALSE(is_device_backend(*cpu));
  EXPECT_TRUE(is_device_backend(FakeDevice(8 * GiB)));
  GuardOptions g;
  EXPECT_FALSE(bool(with_device(g, *cpu).device));  // the CPU keeps the /proc probes
  FakeDevice dev(8 * GiB);
  EXPECT_TRUE(bool(with_device(g, dev).device));
  g.probe = [] { return std::pair<uint64_t, uint64_t>{1, 2}; };  // an injected probe wins
  EXPECT_FALSE(bool(with_device(g, dev).device));
}

TEST(DeviceSupport, RegistrySumsTheProcesssDeviceBackends) {
  DeviceBackends reg;
  FakeDevice a(8 * GiB), b(8 * GiB), c(8 * GiB);
  a.extra = 1 * GiB;
  b.extra = 2 * GiB;
  c.extra = GiB / 2;
  reg.add(&a);
  reg.add(&b);
  reg.add(&a);  // once only
  EXPECT_EQ(reg.allocated_with(a), a.allocated_bytes() + b.allocated_bytes());
  EXPECT_EQ(reg.allocated_with(c), a.allocated_bytes() + b.allocated_bytes() + c.allocated_bytes());
  reg.remove(&b);
  EXPECT_EQ(reg.allocated_with(a), a.allocated_bytes());
  FakeDevice d(80 * GiB, 30 * GiB);
  d.extra = 5 * GiB;
  DeviceMemory m = device_memory_probe(d, reg)();
  EXPECT_EQ(m.allocated, a.allocated_bytes() + d.allocated_bytes());
  EXPECT_EQ(m.free, 30 * GiB);
  EXPECT_EQ(m.total, 80 * GiB);
}

TEST(DeviceSupport, GuardProbeAndLimitComeFromTheDevice) {
  GuardOptions g;
  g.device = [] { return DeviceMemory{3 * GiB, 5 * GiB, 80 * GiB}; };
  auto [used, avail] = guard_probe(g);
  EXPECT_EQ(used, 3 * GiB);
  EXPECT_EQ(avail, 5 * GiB);
  EXPECT_EQ(resolve_guard_limit(g), 76 * GiB);  // 80 GiB minus 5%
  g.config.limit = *MemoryLimit::parse("25%");
  EXPECT_EQ(resolve_guard_limit(g), 20 * GiB);
  g.probe = [] { return std::pair<uint64_t, uint64_t>{7, 8}; };
  EXPECT_EQ(guard_probe(g), (std::pair<uint64_t, uint64_t>{7, 8}));
}

TEST(DeviceSupport, PolicyTheDeviceCannotKeepIsRefused) {
  auto cpu = make_cpu_backend();
  auto model = Model::load(micro(), *cpu);
  KvPolicy tq;
  tq.mode = KvPolicy::Mode::TurboQuant;
  tq.format.head_dim = int(model->config().head_dim);
  FakeDevice dev(8 * GiB);
  EXPECT_NO_THROW(check_backend_kv(*cpu, tq, model->config()));      // the host keeps any codec
  EXPECT_NO_THROW(check_backend_kv(dev, KvPolicy{}, model->config()));  // dense: always
  try {
    check_backend_kv(dev, tq, model->config());
    FAIL() << "a device without TurboQuant accepted a TurboQuant policy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv dense"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fake-device"), std::string::npos) << e.what();
  }
  dev.tq_on_device = true;
  EXPECT_NO_THROW(check_backend_kv(dev, tq, model->config()));
}

TEST(DeviceSupport, RequestsRefuseTheCacheBeforeUsingIt) {
  FakeDevice dev(8 * GiB);
  auto model = Model::load(micro(), dev);
  GenerateOptions o;
  o.max_tokens = 2;
  o.kv.mode = KvPolicy::Mode::TurboQuant;
  o.kv.format.head_dim = int(model->config().head_dim);
  EXPECT_THROW(generate(*model, prompt(16), o), Error);
  EngineConfig ec;
  ec.ctx_size = 256;
  ec.kv = o.kv;
  EXPECT_THROW(EngineLoop(std::move(model), ec), Error);
}

TEST(DeviceSupport, GuardCountsDeviceMemoryAgainstTheDeviceLimit) {
  FakeDevice dev(4 * GiB, 3 * GiB);  // device limit: 4 GiB - 1 GiB reserve = 3 GiB
  auto model = Model::load(micro(), dev);
  GenerateOptions o;
  o.max_tokens = 2;
  o.prefill_chunk = 16;
  o.guard.enabled = true;
  o.guard.config.chunk = 16;
  o.guard.config.min_chunk = 16;
  o.guard.config.sustained_samples = 1;
  o.guard.wait_ms = 0;
  GenerateResult r = generate(*model, prompt(64), o);
  ASSERT_FALSE(r.error.failed()) << r.error.message;
  EXPECT_EQ(r.guard.limit, 3 * GiB);  // the device's, not the host's RAM
  EXPECT_GE(r.guard.peak_used, model->weight_bytes());

  // Another model of the process holds 2.9 GiB of the device: this one's prefill is refused
  // (retryable), although the host has plenty.
  FakeDevice other(4 * GiB);
  other.extra = uint64_t(2.9 * double(GiB));
  DeviceBackends::global().add(&other);
  r = generate(*model, prompt(64), o);
  DeviceBackends::global().remove(&other);
  EXPECT_EQ(r.error.type, "memory_pressure");
  EXPECT_TRUE(r.error.retryable);
  EXPECT_GE(r.guard.peak_used, other.extra);
}

TEST(DeviceSupport, EngineRegistersItsDeviceBackendWhileItLives) {
  auto dev = std::make_unique<FakeDevice>(8 * GiB);
  FakeDevice* raw = dev.get();
  raw->extra = GiB;
  FakeDevice probe(8 * GiB);
  const uint64_t before = DeviceBackends::global().allocated_with(probe);
  {
    auto model = Model::load(micro(), *dev);
    EngineConfig ec;
    ec.ctx_size = 256;
    EngineLoop loop(std::move(model), ec, std::move(dev));
    EXPECT_EQ(DeviceBackends::global().allocated_with(probe), before + raw->allocated_bytes());
  }
  EXPECT_EQ(DeviceBackends::global().allocated_with(probe), before);
}

TEST(DeviceSupport, PoolEstimatesTheDevicesFormats) {
  const uint64_t cpu = estimate_model_bytes(micro(), 256);
  const uint64_t dev = estimate_model_bytes(micro(), 256, /*device=*/true);
  EXPECT_LT(dev, cpu);      // bf16 matrices and KV
  EXPECT_GE(2 * dev, cpu);  // vectors stay f32
}

}  // namespace
}  // namespace tq
