// Status checks for every CUDA runtime, cuBLAS(Lt) and NCCL call of the
// CUDA backend: a failure throws CudaError naming the call, the file and
// the line, and the library's own error string. The runtime turns it into
// exit status 1 (a runtime fault) with the section and replica named.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace maestro {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(const char* what, const char* lib, int code, const char* detail, const char* file,
                                   int line);

}  // namespace maestro

#define MAESTRO_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                            \
    const cudaError_t maestro_status_ = (call);                                                                   \
    if (maestro_status_ != cudaSuccess)                                                                           \
      ::maestro::throw_cuda_error(#call, "CUDA", int(maestro_status_), cudaGetErrorString(maestro_status_),       \
                                  __FILE__, __LINE__);                                                            \
  } while (0)

// After a kernel launch: a bad launch configuration is reported here, a
// fault inside the kernel at the next synchronising call.
#define MAESTRO_CUDA_LAUNCH_CHECK() MAESTRO_CUDA_CHECK(cudaGetLastError())

#define MAESTRO_CUBLAS_CHECK(call)                                                                                \
  do {                                                                                                            \
    const cublasStatus_t maestro_status_ = (call);                                                                \
    if (maestro_status_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::maestro::throw_cuda_error(#call, "cuBLAS", int(maestro_status_), cublasGetStatusString(maestro_status_),  \
                                  __FILE__, __LINE__);                                                            \
  } while (0)

#define MAESTRO_NCCL_CHECK(call)                                                                                  \
  do {                                                                                                            \
    const ncclResult_t maestro_status_ = (call);                                                                  \
    if (maestro_status_ != ncclSuccess)                                                                           \
      ::maestro::throw_cuda_error(#call, "NCCL", int(maestro_status_), ncclGetErrorString(maestro_status_),       \
                                  __FILE__, __LINE__);                                                            \
  } while (0)
