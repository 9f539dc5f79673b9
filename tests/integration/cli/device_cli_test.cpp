// --device and --gpu-mem-limit of generate, score and serve through the real binary: clear
// errors (exit 1, the flag named, never a crash) for a GPU that is absent, a limit given to the
// wrong device, and a limit that is not a size. On a machine with a GPU the no-GPU cases skip.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "common/fixtures.h"
#include "common/serve_process.h"

namespace tq::test {
namespace {

using ::testing::HasSubstr;

const std::string kMicro = repo_path("models/micro-qwen3").string();

#define SKIP_WITH_GPU() \
  if (::tq::cuda_available()) GTEST_SKIP() << "a GPU is present: the no-GPU errors do not apply"

TEST(DeviceCli, CudaWithoutGpuIsAClearError) {
  SKIP_WITH_GPU();
  for (const std::string cmd : {"generate --prompt-ids 1,2,3 --max-tokens 1", "score --ids 1,2,3"}) {
    CmdResult r = run_tqserve(cmd + " --model " + kMicro + " --device cuda");
    EXPECT_EQ(r.status, 1) << cmd << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("--device cuda")) << cmd;
    EXPECT_THAT(r.err, HasSubstr("CUDA")) << cmd;
  }
}

TEST(DeviceCli, ValidateCudaWithoutGpuFailsBeforeAnyCell) {
  SKIP_WITH_GPU();
  const auto out = std::filesystem::temp_directory_path() / "tq_validate_cuda_nogpu";
  std::filesystem::remove_all(out);
  CmdResult r = run_tqserve("validate --model " + kMicro + " --out " + out.string() +
                            " --tokens 256 --texts 1 --needle-docs 1 --device cuda");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda"));
  EXPECT_FALSE(std::filesystem::exists(out / "journal.jsonl")) << "no cell may start without the GPU";
  r = run_tqserve("validate --help");
  EXPECT_THAT(r.out, HasSubstr("--device"));
}

TEST(DeviceCli, ServeCudaWithoutGpuFailsAtStartup) {
  SKIP_WITH_GPU();
  CmdResult r = run_tqserve("serve --model " + kMicro + " --device cuda --port 0");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("listening")));
  // TurboQuant KV is no longer refused by the flags alone: the device decides at load.
  r = run_tqserve("serve --model " + kMicro + " --device cuda --kv turboquant --port 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("--device cuda"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("dense KV only")));
}

TEST(DeviceCli, ServeValidatesTheDevice) {
  CmdResult r = run_tqserve("serve --model " + kMicro + " --device tpu --port 0");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err + r.out, HasSubstr("--device"));
  r = run_tqserve("serve --help");
  EXPECT_THAT(r.out, HasSubstr("--device"));
  EXPECT_THAT(r.out, HasSubstr("--gpu-mem-limit"));
}

TEST(DeviceCli, GpuMemLimitNeedsCuda) {
  CmdResult r = run_tqserve("generate --model " + kMicro + " --prompt-ids 1,2,3 --max-tokens 1 "
                            "--gpu-mem-limit 10G");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--gpu-mem-limit needs --device cuda"));
  r = run_tqserve("serve --model " + kMicro + " --gpu-mem-limit 10G --port 0");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--gpu-mem-limit needs --device cuda"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("listening")));
}

TEST(DeviceCli, GpuMemLimitParsing) {
  // Flags are checked before the device: these errors show on any machine.
  CmdResult r = run_tqserve("score --model " + kMicro + " --ids 1,2,3 --device cuda --gpu-mem-limit lots");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--gpu-mem-limit: 'lots' is not a size"));
  r = run_tqserve("serve --model " + kMicro + " --device cuda --gpu-mem-limit 120% --port 0");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--gpu-mem-limit: '120%'"));
  // A host limit does not bound GPU memory.
  r = run_tqserve("generate --model " + kMicro + " --prompt-ids 1,2,3 --max-tokens 1 --device cuda "
                  "--mem-limit 2G");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("use --gpu-mem-limit"));
}

TEST(DeviceCli, GoodGpuMemLimitsReachTheDevice) {
  SKIP_WITH_GPU();
  // Accepted sizes and percents: what stops the run is the absent GPU, not the flag.
  for (const std::string lim : {"90%", "100G", "512MiB"}) {
    CmdResult r = run_tqserve("generate --model " + kMicro + " --prompt-ids 1,2,3 --max-tokens 1 "
                              "--device cuda --gpu-mem-limit " + lim);
    EXPECT_EQ(r.status, 1) << lim;
    EXPECT_THAT(r.err, HasSubstr("--device cuda")) << lim;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--gpu-mem-limit"))) << lim;
  }
}

TEST(DeviceCli, CpuRunsAreUnchanged) {
  CmdResult r = run_tqserve("generate --model " + kMicro + " --prompt-ids 1,2,3 --max-tokens 2 "
                            "--device cpu --kv turboquant --memory-guard --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"prompt_tokens\":3"));
}

}  // namespace
}  // namespace tq::test
