// How many CUDA devices this machine has — what `backend = "auto"` and
// `cluster.devices = 0` resolve against — and the host-side CUDA runtime
// calls the layers below the backend need (which GPU a device is; pinning
// host memory). Always provided; a build without the CUDA toolkit cannot ask
// the driver and says so (no value, false) rather than claiming there is no
// GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace maestro {

// Number of usable CUDA devices (0 when no driver is loaded or no device is
// present); std::nullopt when this binary was built without the CUDA toolkit
// and so cannot know. Never throws.
std::optional<int> cuda_device_count();

// Device `device`'s PCI bus id ("0000:3b:00.0"): with the host's name,
// which GPU it is across the processes of a run, as NCCL tells ranks on
// one GPU apart; std::nullopt without the toolkit or the device.
std::optional<std::string> cuda_pci_bus_id(int device);

// Device `device`'s name ("NVIDIA H200") and memory in bytes, which the
// planner's profile of a cuda run takes (actors/run_plan.h, gpu_cluster);
// std::nullopt without the toolkit or the device. Never throws.
struct CudaDeviceInfo {
  std::string name;
  int64_t memory_bytes = 0;
};
std::optional<CudaDeviceInfo> cuda_device_info(int device);

// Page-locks [base, base + bytes) of host memory for every device's copies
// (cudaHostRegister, portable), so they run as DMA; false where it cannot
// (no toolkit, no driver or device, the locked-memory limit, memory already
// registered) — the memory then stays pageable. Never throws; clears the
// CUDA error it leaves.
bool cuda_pin_host(void* base, size_t bytes);
// Undoes cuda_pin_host before the memory is freed; errors (the runtime
// already shutting down) are ignored.
void cuda_unpin_host(void* base);

}  // namespace maestro
