// safetensors parsing (every header field validated before any byte is trusted) and the mmapped
// single-file / sharded tensor store.
#include "io/safetensors.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace tq {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

TensorInfo parse_entry(const std::string& name, const nlohmann::json& v, uint64_t data_size) {
  TensorInfo t;
  t.name = name;
  if (!v.is_object()) fail("tensor '{}': entry is not an object", name);
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) fail("tensor '{}': missing dtype", name);
  if (!parse_dtype(dt->get<std::string>(), &t.dtype))
    fail("tensor '{}': unsupported dtype '{}'", name, dt->get<std::string>());
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) fail("tensor '{}': missing shape", name);
  if (sh->size() > 8) fail("tensor '{}': {} dimensions is too many", name, sh->size());
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      fail("tensor '{}': shape entries must be non-negative integers", name);
    uint64_t dim = d.get<uint64_t>();
    if (dim > (uint64_t(1) << 40) || (dim && numel > std::numeric_limits<uint64_t>::max() / dim))
      fail("tensor '{}': shape overflows", name);
    numel *= dim;
    t.shape.push_back(int64_t(dim));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail("tensor '{}': data_offsets must be two non-negative integers", name);
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end) fail("tensor '{}': data_offsets [{}, {}) are reversed", name, t.begin, t.end);
  if (t.end > data_size)
    fail("tensor '{}': data_offsets end {} is past the data section ({} bytes): truncated file?",
         name, t.end, data_size);
  uint64_t want = numel * dtype_size(t.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / 8 || t.end - t.begin != want)
    fail("tensor '{}': {} bytes for dtype {} and {} elements, expected {}", name, t.end - t.begin,
         dtype_name(t.dtype), numel, want);
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) fail("file is {} bytes, too short for a safetensors header", bytes.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[size_t(i)];
  if (n > kMaxHeaderBytes) fail("header length {} exceeds the 100 MB limit", n);
  if (n > bytes.size() - 8)
    fail("header length {} runs past the end of the file ({} bytes): truncated file?", n,
         bytes.size());
  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = bytes.size() - h.data_offset;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(n));
  } catch (const nlohmann::json::parse_error& e) {
    fail("header JSON is invalid at byte {}: {}", 8 + e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. a number out of range
    fail("header JSON is invalid: {}", e.what());
  }
  if (!j.is_object()) fail("header JSON is not an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("__metadata__ value '{}' is not a string", m.key());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), *it, data_size));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const auto& a = h.tensors[i - 1];
    const auto& b = h.tensors[i];
    if (b.begin < a.end) fail("tensors '{}' and '{}' overlap", a.name, b.name);
  }
  return h;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  header_ = with_context(path.string(), [&] { return parse_safetensors(file_.bytes()); });
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

TensorView SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return {};
  const TensorInfo& t = header_.tensors[it->second];
  return {&t, file_.bytes().data() + header_.data_offset + t.begin};
}

void SafetensorsFile::release(const TensorView& t) const {
  if (t.info) file_.release(t.data, size_t(t.info->end - t.info->begin));
}

TensorStore::TensorStore(const std::filesystem::path& model_dir) : dir_(model_dir) {
  namespace fs = std::filesystem;
  fs::path index = model_dir / "model.safetensors.index.json";
  fs::path single = model_dir / "model.safetensors";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index)) {
    nlohmann::json j = read_json_file(index);
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      fail("{}: missing \"weight_map\" object", index.string());
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) fail("{}: weight_map['{}'] is not a string", index.string(), it.key());
      std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        fail("{}: shard name '{}' must be a plain file name", index.string(), shard);
      weight_map[it.key()] = shard;
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end())
        shard_names.push_back(shard);
    }
  } else if (fs::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", model_dir.string());
  }
  std::sort(shard_names.begin(), shard_names.end());
  for (const auto& s : shard_names) {
    files_.push_back(std::make_unique<SafetensorsFile>(model_dir / s));
    size_t fi = files_.size() - 1;
    for (const auto& t : files_.back()->header().tensors) {
      auto [it, inserted] = where_.emplace(t.name, fi);
      if (!inserted)
        fail("tensor '{}' appears in both {} and {}", t.name, files_[it->second]->path().string(),
             files_[fi]->path().string());
    }
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = where_.find(name);
    if (it == where_.end() || files_[it->second]->path().filename() != shard)
      fail("{}: index lists tensor '{}' in {}, but that file does not hold it", index.string(),
           name, shard);
  }
}

TensorView TensorStore::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("{}: tensor '{}' is missing", dir_.string(), name);
  return files_[it->second]->find(name);
}

void TensorStore::release(const std::string& name) const {
  auto it = where_.find(name);
  if (it != where_.end()) files_[it->second]->release(files_[it->second]->find(name));
}

bool TensorStore::has(const std::string& name) const { return where_.count(name) != 0; }

std::filesystem::path TensorStore::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("{}: tensor '{}' is missing", dir_.string(), name);
  return files_[it->second]->path();
}

std::vector<std::filesystem::path> TensorStore::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : where_) out.push_back(n);
  return out;
}

}  // namespace tq
