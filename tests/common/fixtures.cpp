// Test fixture paths, resolved from the source tree the tests were built from.
#include "common/fixtures.h"

namespace tq::test {

std::filesystem::path repo_path(const std::string& rel) {
  return std::filesystem::path(TQ_SOURCE_DIR) / rel;
}

std::optional<std::filesystem::path> shared_path(const std::string& rel) {
  auto p = std::filesystem::path(TQ_SOURCE_DIR) / ".." / "shared" / rel;
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return std::nullopt;
  return std::filesystem::weakly_canonical(p, ec);
}

std::filesystem::path tqserve_binary() { return std::filesystem::path(TQ_BINARY_DIR) / "tqserve"; }

}  // namespace tq::test
