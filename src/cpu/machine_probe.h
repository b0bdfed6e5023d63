// This machine's CPU throughput, measured for `maestro-run --calibrate`
// (cli/engine_calibration.h turns it into a device profile): the sgemm peak
// through OpenBLAS, the library the CPU backend's GEMMs use, and the memory
// bandwidth through a STREAM-style triad. Each probe keeps the best of a few
// timed repetitions. No planner types here: the CLI assembles the profile.
#pragma once

#include <cstddef>

namespace maestro {

// FLOP/s of the best of `reps` n×n×n sgemm calls (2n³ FLOP each).
double measure_sgemm_flops(int n = 2048, int reps = 4);

// Bytes/s of the best of `reps` passes of a[i] = b[i] + s·c[i] over three
// arrays of `floats` floats (3 · 4 · floats bytes moved per pass).
double measure_triad_bytes_per_s(size_t floats = size_t(16) << 20, int reps = 5);

}  // namespace maestro
