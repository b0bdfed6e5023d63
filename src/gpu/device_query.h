// How many CUDA devices this machine has — what `backend = "auto"` and
// `cluster.devices = 0` resolve against. Always provided; a build without the
// CUDA toolkit cannot ask the driver and says so (no value) rather than
// claiming there is no GPU.
#pragma once

#include <optional>

namespace maestro {

// Number of usable CUDA devices (0 when no driver is loaded or no device is
// present); std::nullopt when this binary was built without the CUDA toolkit
// and so cannot know. Never throws.
std::optional<int> cuda_device_count();

}  // namespace maestro
