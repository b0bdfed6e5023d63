// The emulator's CUDA runtime (shim/cuda_runtime_api.h): devices whose
// memory is host memory, streams and events that are reached as soon as
// work is queued (it runs when queued), and the few device properties the
// backend asks for — those of a GPU with 80 GiB and compute capability 8.6's
// shared memory (cuda_emulator.h). The environment names the devices for a
// program over the emulator (maestro-run-emulated): MAESTRO_EMULATED_GPUS
// of them (1 without it), called MAESTRO_EMULATED_GPU_NAME ("Maestro
// emulated GPU" without it).
#include <algorithm>
#include <chrono>
#include <cstdio>
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
  int device;               // -1: pinned host memory (cudaMallocHost, cudaHostRegister)
  bool registered = false;  // cudaHostRegister's: the caller's memory
};

// An event holds the host clock's reading when it was recorded.
struct Event {
  std::chrono::steady_clock::time_point at;
};

int devices_from_environment() {
  const char* n = std::getenv("MAESTRO_EMULATED_GPUS");
  return n ? std::max(0, std::atoi(n)) : 1;
}

std::mutex g_mu;
std::map<uintptr_t, Allocation> g_allocations;  // by base address
int g_devices = devices_from_environment();
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
  auto it = g_allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocations.end() || it->second.registered) return cudaErrorInvalidValue;
  g_allocations.erase(it);
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

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= g_devices) return cudaErrorInvalidDevice;
  *p = {};
  const char* name = std::getenv("MAESTRO_EMULATED_GPU_NAME");
  std::snprintf(p->name, sizeof p->name, "%s", name ? name : "Maestro emulated GPU");
  p->totalGlobalMem = kDeviceBytes;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (device < 0 || device >= g_devices || length <= 0) return cudaErrorInvalidDevice;
  std::snprintf(bus_id, size_t(length), "0000:%02x:00.0", 0x10 + device);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  std::lock_guard lock(g_mu);
  if (!p || !g_allocations.emplace(reinterpret_cast<uintptr_t>(p), Allocation{bytes, -1, true}).second)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
  std::lock_guard lock(g_mu);
  auto it = g_allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocations.end() || !it->second.registered) return cudaErrorInvalidValue;
  g_allocations.erase(it);
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
cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes); }

// Streams and events are tokens: work is done when it is queued.
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
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
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = reinterpret_cast<cudaEvent_t>(new Event{std::chrono::steady_clock::now()});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event) return cudaErrorInvalidValue;
  reinterpret_cast<Event*>(event)->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) { return event ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return cudaErrorInvalidValue;
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(end)->at - reinterpret_cast<Event*>(start)->at)
            .count();
  return cudaSuccess;
}
