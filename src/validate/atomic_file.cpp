// write_file_atomic and the JSON-lines journal (POSIX open/write/fsync/rename).
#include "validate/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace tq::validate {
namespace {

void write_all(int fd, const std::string& data, const std::filesystem::path& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: write failed: {}", path.string(), std::strerror(errno));
    off += size_t(n);
  }
}

void fsync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, const std::string& data) {
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp.string(), std::strerror(errno));
  try {
    write_all(fd, data, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("{}: fsync failed: {}", tmp.string(), std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("{}: rename failed: {}", path.string(), std::strerror(errno));
  }
  fsync_dir(path.parent_path());
}

void journal_append(const std::filesystem::path& path, const nlohmann::json& entry) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot open the journal: {}", path.string(), std::strerror(errno));
  try {
    write_all(fd, entry.dump() + "\n", path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) fail("{}: fsync failed", path.string());
  fsync_dir(path.parent_path());
}

std::vector<nlohmann::json> journal_read(const std::filesystem::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace tq::validate
