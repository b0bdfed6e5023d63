// Calibration of this machine's CPU as a device profile (`maestro-run
// --calibrate OUT.toml`): sgemm throughput through OpenBLAS and memory
// bandwidth through a STREAM-style triad, so the planner can target the CPU
// backend with measured rather than guessed figures.
#pragma once

#include "plan/devices.h"

namespace maestro {

// Measures for about a second each; name "cpu-calibrated", memory = the
// machine's physical memory.
DeviceSpec measure_local_cpu();

}  // namespace maestro
