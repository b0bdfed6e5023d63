// Device queries and host pinning through the CUDA runtime API (device_query.h).
#include "gpu/device_query.h"

#include "transport/pinned_ranges.h"

#if MAESTRO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace maestro {

std::optional<int> cuda_device_count() {
#if MAESTRO_HAVE_CUDA
  int count = 0;
  // No driver or no device is an error code here, not a crash.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later callers
    return 0;
  }
  return count;
#else
  return std::nullopt;
#endif
}

std::optional<std::string> cuda_pci_bus_id(int device) {
#if MAESTRO_HAVE_CUDA
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return std::string(bus);
#else
  (void)device;
  return std::nullopt;
#endif
}

std::optional<CudaDeviceInfo> cuda_device_info(int device) {
#if MAESTRO_HAVE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return CudaDeviceInfo{p.name, int64_t(p.totalGlobalMem)};
#else
  (void)device;
  return std::nullopt;
#endif
}

bool cuda_pin_host(void* base, size_t bytes) {
#if MAESTRO_HAVE_CUDA
  if (cudaHostRegister(base, bytes, cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  pinned_host_ranges().add(base, bytes);
  return true;
#else
  (void)base, (void)bytes;
  return false;
#endif
}

void cuda_unpin_host(void* base) {
#if MAESTRO_HAVE_CUDA
  pinned_host_ranges().remove(base);
  if (cudaHostUnregister(base) != cudaSuccess) cudaGetLastError();
#else
  (void)base;
#endif
}

}  // namespace maestro
