// cupti_trace: a CUDA injection library (CUDA_INJECTION64_PATH=libcupti_trace.so) that records
// every kernel's GPU start/end with CUPTI's activity API and writes them at exit as CSV
// (start_ns,end_ns,grid_x,name) to $TQ_TRACE_OUT (default cupti_trace.csv). With $TQ_TRACE_API
// set it also records every CUDA runtime call's host start/end on the same clock and writes them
// there as CSV (start_ns,end_ns,correlation,name), with each kernel again as a line named
// "kernel:<name>" (GPU times, the correlation of its launch call; bench/api_summary.py). An unperturbed
// timeline for bench/trace_step_summary.py where nsys is not installed (no serialization, unlike
// Nsight Compute). Build: g++ -shared -fPIC -I$CUDA/include cupti_trace.cpp -L$CUDA/lib -lcupti
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Rec {
  uint64_t start, end;
  int32_t grid;
  std::string name;
};
std::mutex mu;
bool api_on = false;  // $TQ_TRACE_API set
std::vector<Rec>* recs = new std::vector<Rec>;  // never freed: written at exit
std::vector<Rec>* api = new std::vector<Rec>;   // runtime calls and kernels (grid = correlation)

void CUPTIAPI on_request(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buf = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI on_complete(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      auto* a = reinterpret_cast<CUpti_ActivityAPI*>(r);
      const char* name = nullptr;
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
      api->push_back({a->start, a->end, int32_t(a->correlationId), name ? name : "?"});
      continue;
    }
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(r);
    recs->push_back({k->start, k->end, k->gridX, k->name ? k->name : "?"});
    if (api_on) api->push_back({k->start, k->end, int32_t(k->correlationId), std::string("kernel:") + (k->name ? k->name : "?")});
  }
  free(buf);
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("TQ_TRACE_OUT");
  FILE* f = std::fopen(path && *path ? path : "cupti_trace.csv", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(mu);
  for (const Rec& r : *recs)
    std::fprintf(f, "%llu,%llu,%d,%s\n", (unsigned long long)r.start, (unsigned long long)r.end,
                 r.grid, r.name.c_str());
  std::fclose(f);
  const char* api_path = std::getenv("TQ_TRACE_API");
  if (!api_path || !*api_path) return;
  if (FILE* a = std::fopen(api_path, "w")) {
    for (const Rec& r : *api)
      std::fprintf(a, "%llu,%llu,%d,%s\n", (unsigned long long)r.start, (unsigned long long)r.end,
                   r.grid, r.name.c_str());
    std::fclose(a);
  }
}

}  // namespace

extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(on_request, on_complete) != CUPTI_SUCCESS) return 0;
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  if (const char* a = std::getenv("TQ_TRACE_API"); a && *a) {
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) return 0;
    api_on = true;
  }
  std::atexit(write_out);
  return 1;
}
