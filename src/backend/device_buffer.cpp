// DeviceBuffer: RAII over Backend::alloc / release.
#include "backend/backend.h"

namespace tq {

DeviceBuffer::DeviceBuffer(Backend* backend, size_t bytes)
    : backend_(backend), data_(bytes ? backend->alloc(bytes) : nullptr), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() {
  if (data_) backend_->release(data_, bytes_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : backend_(o.backend_), data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) backend_->release(data_, bytes_);
    backend_ = o.backend_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace tq
