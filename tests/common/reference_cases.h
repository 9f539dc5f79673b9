// ReferenceCases: reads a model fixture's reference/ (what transformers computed) for golden tests.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace tq::test {

class ReferenceCases {
 public:
  explicit ReferenceCases(const std::filesystem::path& reference_dir);
  const nlohmann::json& json() const { return json_; }
  std::vector<int32_t> ints(const std::string& name) const;   // I32 tensor
  std::vector<float> floats(const std::string& name) const;   // F32 tensor
  bool has(const std::string& name) const { return file_.find(name).info != nullptr; }
  // Names of cases of a kind ("logits", "greedy") from reference.json.
  std::vector<std::string> case_names(const std::string& kind) const;
  // Needle documents: tensor prefixes "needle_<L>_<J>" present in the file.
  std::vector<std::string> needle_docs() const;

 private:
  nlohmann::json json_;
  SafetensorsFile file_;
};

}  // namespace tq::test
