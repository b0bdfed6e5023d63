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

// Which GPU device `device` is, across the processes of a run: this host's
// name and the device's PCI bus id ("node-3/0000:3b:00.0"), as NCCL tells
// ranks on one GPU apart; std::nullopt without the toolkit or the device.
std::optional<std::string> cuda_device_identity(int device);

}  // namespace maestro
