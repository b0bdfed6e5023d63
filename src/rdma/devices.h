// The ibverbs devices of this machine — what `transport = "auto"` and an
// empty `rdma_device` resolve against. Always provided: a build without
// libibverbs answers an empty list.
#pragma once

#include <string>
#include <vector>

namespace maestro {

// Names of the RDMA devices ("mlx5_0", ...); empty when ibverbs is not built
// in or no device is present. Never throws.
std::vector<std::string> rdma_device_names();

}  // namespace maestro
