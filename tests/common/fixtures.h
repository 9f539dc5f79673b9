// Test fixtures: where the repo's models and ../shared live, and reference-file helpers.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

namespace tq::test {

// Absolute path of a file or folder inside the repository (e.g. "models/micro-qwen3").
std::filesystem::path repo_path(const std::string& rel);
// Path inside ../shared, or nullopt when ../shared (or that entry) is absent.
std::optional<std::filesystem::path> shared_path(const std::string& rel);
// Path of the built tqserve binary.
std::filesystem::path tqserve_binary();

}  // namespace tq::test

// Skips the current test with a clear message when a ../shared fixture is missing.
#define TQ_REQUIRE_SHARED(var, rel)                                                  \
  auto var##_opt = ::tq::test::shared_path(rel);                                     \
  if (!var##_opt) GTEST_SKIP() << "../shared/" << rel << " is absent: skipping";     \
  const std::filesystem::path var = *var##_opt
