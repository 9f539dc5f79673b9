// safetensors: a pure, bounds-checked parser over the file's bytes, and SafetensorsFile (mmap).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/file.h"

namespace tq {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section (after the header)
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // 8 + header length: where the data section starts in the file
  std::vector<TensorInfo> tensors;            // sorted by begin offset
  std::map<std::string, std::string> metadata;
};

// Parses and validates the header of a safetensors file whose complete contents are `bytes`:
// header length, JSON, dtype names, shapes, offsets (in range, matching dtype*shape, not
// overlapping). Throws Error with the tensor name or byte offset of the first problem.
SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes);

// A tensor's bytes inside a mapped file.
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
};

// SafetensorsFile: one mmapped, validated .safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  const SafetensorsHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return file_.path(); }
  // nullptr-info view when absent.
  TensorView find(const std::string& name) const;
  // The tensor's pages leave this process's memory (MappedFile::release); its view stays valid.
  void release(const TensorView& t) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// TensorStore: every tensor of a model directory, single-file (model.safetensors) or sharded
// (model.safetensors.index.json naming the shard of each tensor).
class TensorStore {
 public:
  explicit TensorStore(const std::filesystem::path& model_dir);
  // Throws Error naming the tensor (and the model directory) when absent.
  TensorView get(const std::string& name) const;
  bool has(const std::string& name) const;
  // Path of the file that holds the tensor.
  std::filesystem::path file_of(const std::string& name) const;
  std::vector<std::filesystem::path> files() const;
  std::vector<std::string> names() const;
  // After a tensor's bytes are copied (to a backend): its pages leave this process's memory.
  void release(const std::string& name) const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace tq
