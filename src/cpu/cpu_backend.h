// The CPU backend: every op of nn/backend.h in fp32 — OpenBLAS sgemm for the
// GEMMs (linear, attention's score and value products), fused loops for the
// rest, all on one ThreadPool. Its memory is host memory: F32 and BF16
// storage (convert() rounds to nearest even), host copies are memmoves,
// scalar accumulators are host doubles. Deterministic: every output element is
// computed by one task whose shape depends on the op's shapes only, so the
// bits never depend on the thread count or on timing. OpenBLAS itself runs
// single-threaded (its own threading changes the bits with the thread
// count); a GEMM is split over the pool in fixed output tiles instead. The
// naive reference of every op is cpu/reference_ops.h; docs/engine-ops.md.
#pragma once

#include <memory>

#include "nn/backend.h"

namespace maestro {

// threads: the pool's thread count; 0 = all cores. Sets OpenBLAS (process-
// wide) to one thread.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace maestro
