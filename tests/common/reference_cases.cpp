// ReferenceCases implementation.
#include "common/reference_cases.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io/file.h"

namespace tq::test {

ReferenceCases::ReferenceCases(const std::filesystem::path& dir)
    : json_(read_json_file(dir / "reference.json")), file_(dir / "reference.safetensors") {}

std::vector<int32_t> ReferenceCases::ints(const std::string& name) const {
  TensorView t = file_.find(name);
  if (!t.info || t.info->dtype != DType::I32) throw std::runtime_error("no I32 tensor " + name);
  std::vector<int32_t> v(size_t(t.info->numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

std::vector<float> ReferenceCases::floats(const std::string& name) const {
  TensorView t = file_.find(name);
  if (!t.info || t.info->dtype != DType::F32) throw std::runtime_error("no F32 tensor " + name);
  std::vector<float> v(size_t(t.info->numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

std::vector<std::string> ReferenceCases::case_names(const std::string& kind) const {
  std::vector<std::string> out;
  for (const auto& c : json_["cases"])
    if (c["kind"] == kind) out.push_back(c["name"]);
  return out;
}

std::vector<std::string> ReferenceCases::needle_docs() const {
  std::vector<std::string> out;
  for (const auto& t : file_.header().tensors) {
    const std::string& n = t.name;
    if (n.rfind("needle_", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".ids")
      out.push_back(n.substr(0, n.size() - 4));
  }
  return out;
}

}  // namespace tq::test
