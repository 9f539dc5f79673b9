// CUDA_CHECK for host (.cpp) code of the CUDA backend: a failed runtime call becomes a tq::Error
// with file, line and the runtime's message (kernels' .cu files use cuda_common.cuh).
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(expr)                                                                    \
  do {                                                                                      \
    cudaError_t err_ = (expr);                                                              \
    if (err_ != cudaSuccess)                                                                \
      ::tq::fail("{}:{}: {} failed: {}", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
  } while (0)
