// compare_backends: runs ops of nn/backend.h on two backends with the same
// random inputs (small shapes: packed sequences of 9, 0 and 15 tokens, GQA
// 4 query / 2 kv heads of 32) and reports each output's relative error,
// max |test − ref| / max |ref|. Gradients accumulate into the same random
// starting values on both sides, so the += contract is checked too. The
// ops that sum over rows (the norm, the embedding and the attention
// backward) run twice more on the tested backend from the same values and
// must give the same bits ("… (repeatable)": no atomics, no race).
//
// Two users: the CUDA backend's start-up self-check (fast kernels against
// the reference path on the same device, bf16 tolerance) and bench/gpu's op
// check (the CUDA backend against the CPU backend: bf16 ~1e-2, fp32 1e-5).
// Host code against the Backend interface only, so it is unit-tested here
// with the CPU backend on both sides.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nn/backend.h"

namespace maestro {

struct OpCheck {
  std::string op;      // "attention_backward(causal).dk", ...
  double rel_err = 0;  // max |test − ref| / max |ref| (NaN stays NaN: a failure)
  double tolerance = 0;
  bool ok() const { return rel_err <= tolerance; }  // false for NaN
};

struct CompareOptions {
  double tolerance = 1e-5;       // every output
  double gemm_tolerance = 1e-5;  // outputs of GEMM ops (linear), where precisions may differ
  double attention_tolerance = -1;  // outputs of attention; < 0: `tolerance`
  std::set<std::string> ops;     // op families to run ("linear", "attention", ...); empty = all
  uint32_t seed = 1;
};

// The op families compare_backends knows, in the order it runs them.
const std::vector<std::string>& compared_op_families();

// Throws std::invalid_argument for an unknown name in options.ops.
std::vector<OpCheck> compare_backends(Backend& test, Backend& ref, const CompareOptions& options);

// A hand-off left in `producer`'s memory (actors/section_runner.h), read by
// `consumer` as a runner reads one: wait_for the producer's ready_marker,
// then a held copy of the whole block (copy_from_host_held) and of a
// column slice of it (copy_rows_from_host_held). Both must give back the
// producer's bytes exactly (tolerance 0). On one GPU the copies run device
// to device; from another GPU, peer to peer. The CUDA self-check runs it
// between two backends of its device (self_check.h).
std::vector<OpCheck> check_handoff_copies(Backend& producer, Backend& consumer, uint32_t seed = 1);

}  // namespace maestro
