// EmulatedBackend: nn/backend.h's ops as the CUDA backend makes them
// (src/gpu/cuda/cuda_backend.cpp), on host memory, with every custom kernel
// the real kernel source run by the emulator (emulator/cuda_emulator.h).
// The GEMMs (linear) are cuBLASLt's on a GPU and not ours: here they are
// the CPU backend's. Attention takes one of the backend's paths: the tiled
// fp32 kernels, the flash kernels (bf16 operands), or the batched GEMMs —
// here loops on the host, reading only what cuBLAS would — around the score
// kernels: fp32 (the reference path), or bf16 P and dS (the tensor-core
// path) with causal blocks of `causal_block` query rows (0: none).
// What it mirrors of cuda_backend.cpp is the glue around each launch (the
// scratch, the tiles, the bf16 copies, the token grouping), not that file's
// code: a change there must be made here too.
#pragma once

#include <cstdint>
#include <memory>

#include "nn/backend.h"

namespace maestro::test_support {

enum class EmulatedAttention { Tiled, Flash, Batched, BatchedBf16 };

std::unique_ptr<Backend> make_emulated_backend(EmulatedAttention attention, int64_t causal_block = 0);

}  // namespace maestro::test_support
