// Measurements of one CUDA device for the simulator's device profile
// (`maestro-run --calibrate OUT.toml` with the cuda backend) and for
// bench/gpu: cuBLASLt GEMM rate over several sizes, device-to-device copy
// bandwidth, memory size and name. Plain C++ interface; throws CudaError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maestro {

struct GemmRate {
  int64_t M = 0, N = 0, K = 0;
  double flops = 0;  // FLOP/s, 20 timed runs after 3 warm-ups
};

// Row-major C[M,N] = A[M,K]·B[N,K]ᵀ with fp32 accumulation and output;
// operands bf16 (bf16 = true) or fp32 (no TF32). At the sizes of a
// transformer's GEMMs (square 2048..8192, 16384 tokens × 2048/5504/6144).
std::vector<GemmRate> measure_gemm_rates(int device, bool bf16);
// Bytes per second of a 1 GiB device-to-device copy (read + write counted).
double measure_copy_bandwidth(int device);
int64_t device_memory_bytes(int device);
std::string device_name(int device);

}  // namespace maestro
