// The CPU backend: every op of nn/backend.h in fp32 — OpenBLAS sgemm for the
// GEMMs (linear, attention's score and value products), fused loops on a
// ThreadPool for the rest. Deterministic: a result never depends on timing,
// and not on the thread count except through OpenBLAS (which splits a GEMM
// by output blocks, never along the reduction). The naive reference of every
// op is cpu/reference_ops.h.
#pragma once

#include <memory>

#include "nn/backend.h"

namespace maestro {

// threads: the pool's and OpenBLAS's thread count; 0 = all cores.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace maestro
