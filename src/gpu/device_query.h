// How many CUDA devices this machine has — what `backend = "auto"` and
// `cluster.devices = 0` resolve against. Always provided: a build without the
// CUDA toolkit answers 0.
#pragma once

namespace maestro {

// Number of usable CUDA devices; 0 when CUDA is not built in, no driver is
// loaded or no device is present. Never throws.
int cuda_device_count();

}  // namespace maestro
