// How many CUDA devices this machine has — what `backend = "auto"` and
// `cluster.devices = 0` resolve against. Always provided; a build without the
// CUDA toolkit cannot ask the driver and says so (no value) rather than
// claiming there is no GPU.
#pragma once

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

}  // namespace maestro
