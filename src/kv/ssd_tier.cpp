// SsdTier implementation: POSIX file writes (fsync + rename) and the startup scan.
#include "kv/ssd_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExt = ".tqb";

bool parse_hex_name(const std::string& name, BlockHash& out) {
  if (name.size() != 64 + 4 || name.substr(64) != kExt) return false;
  for (size_t i = 0; i < 32; ++i) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nib(name[2 * i]), lo = nib(name[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = uint8_t(hi * 16 + lo);
  }
  return true;
}

bool read_all(const fs::path& p, std::vector<uint8_t>& out, size_t limit) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  f.seekg(0, std::ios::end);
  std::streamoff n = f.tellg();
  if (n < 0 || size_t(n) > limit) return false;
  f.seekg(0);
  out.resize(size_t(n));
  return bool(f.read(reinterpret_cast<char*>(out.data()), n)) || n == 0;
}

bool write_fully(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

SsdTier::SsdTier(const fs::path& dir, uint64_t max_bytes, const BlockHash& fingerprint)
    : dir_(dir), max_bytes_(max_bytes), fingerprint_(fingerprint) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_)) fail("prefix cache directory {} cannot be created", dir_.string());
  scan();
}

fs::path SsdTier::path_of(const BlockHash& h) const { return dir_ / (block_hash_hex(h) + kExt); }

void SsdTier::scan() {
  struct Found {
    BlockHash hash;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const fs::path p = entry.path();
    const std::string name = p.filename().string();
    if (name.size() > 4 && name.find(".tqb.tmp") != std::string::npos) {
      fs::remove(p, ec);  // a write that never reached its rename
      ++scan_.removed;
      continue;
    }
    BlockHash h;
    if (!entry.is_regular_file(ec) || !parse_hex_name(name, h)) continue;  // not ours
    const uint64_t size = entry.file_size(ec);
    std::vector<uint8_t> head(kBlockFileHeader);
    std::ifstream f(p, std::ios::binary);
    bool read = f && f.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
    BlockFileHeader hdr;
    if (!read || parse_block_header(head, size, fingerprint_, hdr) != BlockFileStatus::Ok ||
        hdr.hash != h) {
      fs::remove(p, ec);
      ++scan_.removed;
      continue;
    }
    found.push_back({h, size, entry.last_write_time(ec)});
  }
  // Newest first into the LRU list, so the oldest files are evicted first.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime > b.mtime; });
  std::lock_guard<std::mutex> lk(mu_);
  for (const Found& f : found) {
    if (bytes_ + f.bytes > max_bytes_) {
      fs::remove(path_of(f.hash), ec);
      ++scan_.evicted;
      continue;
    }
    lru_.push_back(f.hash);
    index_[f.hash] = Entry{f.bytes, std::prev(lru_.end())};
    bytes_ += f.bytes;
    ++scan_.kept;
  }
  rejected_ = scan_.removed;
}

bool SsdTier::contains(const BlockHash& h) const {
  std::lock_guard<std::mutex> lk(mu_);
  return index_.count(h) != 0;
}

void SsdTier::touch_locked(Entry& e, const BlockHash& h) {
  lru_.erase(e.lru);
  lru_.push_front(h);
  e.lru = lru_.begin();
}

void SsdTier::forget_locked(const BlockHash& h) {
  auto it = index_.find(h);
  if (it == index_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  std::error_code ec;
  fs::remove(path_of(h), ec);
}

BlockPtr SsdTier::load(const BlockHash& h) {
  uint64_t expect = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(h);
    if (it == index_.end()) return nullptr;
    expect = it->second.bytes;
    touch_locked(it->second, h);
  }
  std::vector<uint8_t> bytes;
  auto block = std::make_shared<CachedBlock>();
  bool ok = read_all(path_of(h), bytes, size_t(expect)) &&
            parse_block_file(bytes, fingerprint_, *block) == BlockFileStatus::Ok && block->hash == h;
  if (!ok) {
    std::lock_guard<std::mutex> lk(mu_);
    if (index_.count(h)) {
      forget_locked(h);
      ++rejected_;
    }
    return nullptr;
  }
  return block;
}

bool SsdTier::write(const CachedBlock& b) {
  const std::vector<uint8_t> file = encode_block_file(fingerprint_, b);
  if (file.size() > max_bytes_) return false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (index_.count(b.hash)) return true;
    while (bytes_ + file.size() > max_bytes_ && !lru_.empty()) forget_locked(lru_.back());
  }
  const fs::path final_path = path_of(b.hash);
  fs::path tmp = final_path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_fully(fd, file.data(), file.size()) && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return false;
  }
  fsync_dir(dir_);
  std::lock_guard<std::mutex> lk(mu_);
  if (!index_.count(b.hash)) {
    lru_.push_front(b.hash);
    index_[b.hash] = Entry{file.size(), lru_.begin()};
    bytes_ += file.size();
  }
  // Another write may have landed meanwhile: the bound holds after every write.
  while (bytes_ > max_bytes_ && lru_.size() > 1) forget_locked(lru_.back());
  return true;
}

uint64_t SsdTier::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return bytes_;
}
int64_t SsdTier::blocks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(index_.size());
}
int64_t SsdTier::rejected() const {
  std::lock_guard<std::mutex> lk(mu_);
  return rejected_;
}

}  // namespace tq
