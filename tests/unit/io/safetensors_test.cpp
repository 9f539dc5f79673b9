// safetensors parser: valid files parse; every malformed field is rejected with a clear message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <unistd.h>

#include "common/fixtures.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace tq {
namespace {

using ::testing::HasSubstr;

// Builds a file image: 8-byte little-endian header length, header, then `data_bytes` bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0xAB);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
  try {
    parse_safetensors(b);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ParsesValidHeader) {
  auto b = image(R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                 R"("a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})",
                 16);
  SafetensorsHeader h = parse_safetensors(b);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");  // sorted by offset
  EXPECT_EQ(h.tensors[0].dtype, DType::BF16);
  EXPECT_EQ(h.tensors[0].numel(), 4);
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_offset, b.size() - 16);
}

TEST(Safetensors, RejectsShortFile) {
  EXPECT_THAT(error_of({1, 2, 3}), HasSubstr("too short"));
}

TEST(Safetensors, RejectsHeaderLengthPastEnd) {
  auto b = image("{}", 0);
  b[0] = 200;
  EXPECT_THAT(error_of(b), HasSubstr("truncated"));
}

TEST(Safetensors, RejectsHugeHeaderLength) {
  auto b = image("{}", 0);
  b[7] = 0x7f;
  EXPECT_THAT(error_of(b), HasSubstr("100 MB"));
}

TEST(Safetensors, RejectsInvalidJson) {
  EXPECT_THAT(error_of(image("{\"a\":", 0)), HasSubstr("invalid at byte"));
  EXPECT_THAT(error_of(image("[1,2]", 0)), HasSubstr("not an object"));
}

TEST(Safetensors, RejectsUnknownDtype) {
  auto b = image(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1);
  EXPECT_THAT(error_of(b), HasSubstr("unsupported dtype 'Q4'"));
}

TEST(Safetensors, RejectsSizeMismatch) {
  auto b = image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  EXPECT_THAT(error_of(b), HasSubstr("tensor 'w'"));
  EXPECT_THAT(error_of(b), HasSubstr("expected 12"));
}

TEST(Safetensors, RejectsOffsetsPastData) {
  auto b = image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  EXPECT_THAT(error_of(b), HasSubstr("past the data section"));
}

TEST(Safetensors, RejectsOverlap) {
  auto b = image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 12);
  EXPECT_THAT(error_of(b), HasSubstr("overlap"));
}

TEST(Safetensors, RejectsBadShapesAndOffsets) {
  EXPECT_THAT(error_of(image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0)),
              HasSubstr("non-negative"));
  EXPECT_THAT(error_of(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)),
              HasSubstr("reversed"));
  EXPECT_THAT(error_of(image(R"({"w":{"dtype":"F32","shape":[1]}})", 4)),
              HasSubstr("data_offsets"));
  EXPECT_THAT(error_of(image(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
                             R"("data_offsets":[0,4]}})",
                             4)),
              HasSubstr("overflows"));
}

TEST(Safetensors, RealModelFileLoadsAndErrorsNameTheFile) {
  TensorStore store(test::repo_path("models/micro-qwen3"));
  TensorView t = store.get("model.embed_tokens.weight");
  ASSERT_NE(t.info, nullptr);
  EXPECT_EQ(t.info->dtype, DType::BF16);
  EXPECT_EQ(t.info->shape, (std::vector<int64_t>{8192, 256}));
  try {
    store.get("model.layers.99.mlp.up_proj.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("model.layers.99.mlp.up_proj.weight"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("micro-qwen3"));
  }
}

TEST(Safetensors, TruncatedFileOnDiskNamesTheFile) {
  auto src = test::repo_path("models/micro-qwen3/model.safetensors");
  auto dst = std::filesystem::temp_directory_path() / "tq_truncated.safetensors";
  {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> buf(100000);
    in.read(buf.data(), std::streamsize(buf.size()));
    std::ofstream out(dst, std::ios::binary);
    out.write(buf.data(), std::streamsize(buf.size()));
  }
  try {
    SafetensorsFile f(dst);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("tq_truncated.safetensors"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("truncated"));
  }
  std::filesystem::remove(dst);
}

}  // namespace
}  // namespace tq

namespace tq {
namespace {

// The process's resident memory, from /proc/self/statm (pages).
size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t total = 0, resident = 0;
  f >> total >> resident;
  return resident * size_t(::sysconf(_SC_PAGESIZE));
}

// A loaded tensor's pages leave the process (RSS falls by its size) and its bytes read back the
// same from the file afterwards.
TEST(Safetensors, ReleasedTensorLeavesTheProcessAndReadsBack) {
  constexpr size_t kData = 64u << 20;
  const std::string header = R"({"w":{"dtype":"U8","shape":[)" + std::to_string(kData) +
                             R"(],"data_offsets":[0,)" + std::to_string(kData) + "]}}";
  auto b = image(header, kData);
  for (size_t i = 0; i < kData; ++i) b[b.size() - kData + i] = uint8_t(i * 2654435761u >> 13);
  auto path = std::filesystem::temp_directory_path() / ("tq_release_" + std::to_string(::getpid()));
  std::filesystem::create_directories(path);
  std::ofstream(path / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  {
    TensorStore store(path);
    TensorView t = store.get("w");
    const size_t before = resident_bytes();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < kData; i += 4096) sink = sink + t.data[i];  // every page in
    const size_t touched = resident_bytes();
    EXPECT_GT(touched, before + kData * 9 / 10) << "the tensor's pages were not mapped in";
    store.release("w");
    EXPECT_LT(resident_bytes(), touched - kData * 9 / 10) << "the pages stayed resident";
    EXPECT_EQ(std::memcmp(t.data, b.data() + b.size() - kData, kData), 0) << "bytes after release";
    store.release("no such tensor");  // ignored
  }
  std::filesystem::remove_all(path);
}

TEST(Safetensors, NumberOutOfRangeInHeaderIsAnError) {
  std::string h = R"({"w":{"dtype":"F32","shape":[1e99999],"data_offsets":[0,4]}})";
  std::vector<uint8_t> b(8 + h.size() + 4, 0);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(h.size() >> (8 * i));
  std::memcpy(b.data() + 8, h.data(), h.size());
  EXPECT_THROW(parse_safetensors(b), Error);
}

}  // namespace
}  // namespace tq
