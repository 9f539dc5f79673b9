# CUDA backend build, included from the top-level CMakeLists: tq_backend_cuda is the real CUDA
# library when nvcc is found (TQ_CUDA, on by default then), else a stub whose cuda_available()
# is false. Kernels build for sm_90 plus PTX; the Hopper prefill kernel (wgmma) for sm_90a too.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_tq_cuda_default ON)
else()
  set(_tq_cuda_default OFF)
endif()
option(TQ_CUDA "Build the CUDA backend (src/backend/cuda)" ${_tq_cuda_default})
set(TQ_CUDA_ARCHS "90-real;90-virtual" CACHE STRING "CUDA architectures of the CUDA backend")

set(_tq_cuda_dir ${CMAKE_CURRENT_LIST_DIR})
if(TQ_CUDA)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${TQ_CUDA_ARCHS})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 knows no C++20 dialect flag for nvcc (which accepts -std=c++20): teach it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  file(GLOB _tq_cu CONFIGURE_DEPENDS ${_tq_cuda_dir}/*.cu)
  file(GLOB _tq_cuda_cpp CONFIGURE_DEPENDS ${_tq_cuda_dir}/*.cpp)
  list(FILTER _tq_cuda_cpp EXCLUDE REGEX "cuda_unavailable\\.cpp$")
  # Host code (the Backend, cuBLASLt, fmt) is plain .cpp; nvcc sees only kernels and launchers.
  add_library(tq_backend_cuda STATIC ${_tq_cu} ${_tq_cuda_cpp})
  # The Hopper prefill kernels (wgmma) also build for sm_90a; its plain sm_90/PTX builds are
  # empty and the host code picks it only on an sm_90 device running the sm_90a build.
  set_source_files_properties(${_tq_cuda_dir}/prefill_wgmma.cu ${_tq_cuda_dir}/prefill_wgmma_ring.cu
    PROPERTIES COMPILE_OPTIONS
    "--generate-code=arch=compute_90a,code=sm_90a")
  set_target_properties(tq_backend_cuda PROPERTIES CUDA_ARCHITECTURES "${TQ_CUDA_ARCHS}"
    CUDA_STANDARD 20 CUDA_EXTENSIONS OFF CUDA_RUNTIME_LIBRARY Static
    POSITION_INDEPENDENT_CODE ON)
  # Directory-wide C++ warning flags are not nvcc flags: keep them for the .cpp files only.
  set_property(TARGET tq_backend_cuda PROPERTY COMPILE_OPTIONS
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr -Xcompiler=-Wall>)
  target_include_directories(tq_backend_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(tq_backend_cuda PUBLIC tq_backend tq_quant
    PRIVATE CUDA::cudart_static CUDA::cublasLt)
  target_compile_definitions(tq_backend_cuda PUBLIC TQ_HAVE_CUDA=1)
else()
  add_library(tq_backend_cuda STATIC ${_tq_cuda_dir}/kernel_choice.cpp
    ${_tq_cuda_dir}/cuda_unavailable.cpp)
  target_include_directories(tq_backend_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(tq_backend_cuda PUBLIC tq_backend tq_quant)
endif()
