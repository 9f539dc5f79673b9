// Backend's base kv_write / kv_read: f32 stores through copy(), which every backend has.
#include "backend/backend.h"

namespace tq {

namespace {
void check_f32(const KvStore& s, const char* op) {
  if (s.dtype != DType::F32)
    fail("{}: this backend has no {} path for {} KV storage", op, op, dtype_name(s.dtype));
}
}  // namespace

void Backend::kv_write(const KvStore& dst, int64_t at, const float* k, const float* v, int64_t T) {
  check_f32(dst, "kv_write");
  const int64_t d = dst.head_dim, hk = dst.n_head_kv;
  const size_t row = size_t(d) * sizeof(float);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < hk; ++h) {
      const int64_t off = (h * dst.cap + at + t) * d;
      copy(static_cast<float*>(dst.k) + off, k + (t * hk + h) * d, row);
      copy(static_cast<float*>(dst.v) + off, v + (t * hk + h) * d, row);
    }
}

void Backend::kv_read(const KvStore& src, int64_t at, int64_t T, float* k, float* v) {
  check_f32(src, "kv_read");
  const int64_t d = src.head_dim, hk = src.n_head_kv;
  const size_t row = size_t(d) * sizeof(float);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < hk; ++h) {
      const int64_t off = (h * src.cap + at + t) * d;
      copy(k + (t * hk + h) * d, static_cast<const float*>(src.k) + off, row);
      copy(v + (t * hk + h) * d, static_cast<const float*>(src.v) + off, row);
    }
}

}  // namespace tq
