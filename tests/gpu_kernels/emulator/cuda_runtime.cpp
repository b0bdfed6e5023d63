// The emulator's CUDA runtime (shim/cuda_runtime_api.h): devices whose
// memory is host memory, streams and events that are reached as soon as
// work is queued (it runs when queued), and the few device properties the
// backend asks for — those of a GPU with 80 GiB and compute capability 8.6's
// shared memory (cuda_emulator.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda_emulator.h"

namespace {

constexpr size_t kDeviceBytes = size_t(80) << 30;
constexpr int kMaxSharedOptin = 99 << 10;

struct Allocation {
  size_t bytes;
  int device;  // -1: pinned host memory (cudaMallocHost)
};

std::mutex g_mu;
std::map<uintptr_t, Allocation> g_allocations;  // by base address
int g_devices = 1;
thread_local int g_device = 0;

void* allocate(size_t bytes, int device) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (!p) return nullptr;
  std::lock_guard lock(g_mu);
  g_allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, device};
  return p;
}
cudaError_t release(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard lock(g_mu);
  if (g_allocations.erase(reinterpret_cast<uintptr_t>(p)) == 0) return cudaErrorInvalidValue;
  std::free(p);
  return cudaSuccess;
}

}  // namespace

namespace emu {
void set_device_count(int n) { g_devices = n; }
}  // namespace emu

cudaError_t cudaGetDeviceCount(int* count) {
  *count = g_devices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= g_devices) return cudaErrorInvalidDevice;
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = kDeviceBytes;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= g_devices) return cudaErrorInvalidDevice;
  if (attr != cudaDevAttrMaxSharedMemoryPerBlockOptin) return cudaErrorInvalidValue;
  *value = kMaxSharedOptin;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = allocate(bytes, g_device);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) { return release(p); }
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = allocate(bytes, -1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) { return release(p); }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = {cudaMemoryTypeUnregistered, -1, nullptr, nullptr};
  std::lock_guard lock(g_mu);
  const auto q = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocations.upper_bound(q);
  if (it == g_allocations.begin()) return cudaSuccess;
  --it;
  if (q >= it->first + it->second.bytes) return cudaSuccess;
  a->type = it->second.device >= 0 ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  a->device = it->second.device >= 0 ? it->second.device : g_device;
  a->devicePointer = a->hostPointer = const_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t) {
  if (dst_device < 0 || dst_device >= g_devices || src_device < 0 || src_device >= g_devices)
    return cudaErrorInvalidDevice;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  if (bytes) std::memset(dst, value, bytes);
  return cudaSuccess;
}

// Streams and events are tokens: work is done when it is queued.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = reinterpret_cast<cudaStream_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  return event ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) { return event ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventQuery(cudaEvent_t event) { return event ? cudaSuccess : cudaErrorInvalidValue; }
