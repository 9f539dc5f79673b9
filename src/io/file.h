// Whole-file reads and read-only memory maps, with the path in every error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace tq {

std::string read_file(const std::filesystem::path& path);  // throws Error naming the file
// Parses a JSON file; a syntax error names the file and the byte offset.
nlohmann::json read_json_file(const std::filesystem::path& path);

// MappedFile: a read-only, private mmap of a whole file (an empty file maps to an empty span).
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Drops the whole pages inside [p, p + n) from this process's memory (madvise DONTNEED): a
  // loader calls it once a tensor's bytes are copied, so a model's mapped shards do not add their
  // size to the peak RSS. A later read of those bytes maps them again from the file.
  void release(const uint8_t* p, size_t n) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tq
