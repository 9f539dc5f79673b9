// Reference ids, needle prompts and drain() for the EngineLoop tests.
#include "engine_fixture.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/fixtures.h"

namespace tq::test {

std::vector<int32_t> reference_ints(const SafetensorsFile& ref, const std::string& name) {
  TensorView v = ref.find(name);
  EXPECT_NE(v.info, nullptr) << name;
  if (!v.info) return {};
  std::vector<int32_t> out(size_t(v.info->numel()));
  std::memcpy(out.data(), v.data, out.size() * sizeof(int32_t));
  return out;
}

Needle read_needle(const std::filesystem::path& model_dir, const std::string& name) {
  SafetensorsFile ref(model_dir / "reference/reference.safetensors");
  Needle n;
  n.doc = reference_ints(ref, name + ".ids");
  std::vector<int32_t> spans = reference_ints(ref, name + ".spans");  // [n, 2]
  EXPECT_GE(spans.size(), 2u) << name;
  if (spans.size() < 2) return n;
  n.prompt.assign(n.doc.begin(), n.doc.begin() + spans[0]);
  n.answer.assign(n.doc.begin() + spans[0], n.doc.begin() + spans[1]);
  return n;
}

EngineOutcome drain(RequestChannel& ch, std::chrono::milliseconds timeout) {
  EngineOutcome o;
  std::vector<EngineEvent> evs;
  for (;;) {
    if (!ch.wait(evs, timeout)) {
      ADD_FAILURE() << "no event within " << timeout.count() << " ms";
      return o;
    }
    for (const EngineEvent& e : evs) {
      if (e.kind == EngineEvent::Kind::Finished) {
        o.reason = e.reason;
        o.error = e.error;
        o.code = e.error_code;
        o.retryable = e.retryable;
        o.completion_tokens = e.completion_tokens;
        o.cached = e.cached_tokens;
        return o;
      }
      if (e.prompt) o.prompt_events.push_back(e);
      else o.ids.push_back(e.token);
    }
  }
}

void TinyNeedleTest::SetUp() {
  auto dir = shared_path("models/tiny-qwen3");
  if (!dir) GTEST_SKIP() << "../shared/models/tiny-qwen3 is absent: skipping";
  dir_ = *dir;
  model_ = dir_.string();
  Needle n = read_needle(dir_, "needle_4096_0");
  ASSERT_FALSE(n.answer.empty());
  prompt_ = std::move(n.prompt);
  answer_ = std::move(n.answer);
  doc_ = std::move(n.doc);
}

}  // namespace tq::test
