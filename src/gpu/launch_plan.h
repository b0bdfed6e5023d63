// Launch geometry of the CUDA backend's kernels, host code only so it is
// unit-tested here (tests/gpu/launch_plan_test.cpp): grid sizes, and the
// query tiles of the fast attention kernel over packed variable-length
// sequences (a tile never crosses a sequence boundary, so a thread block
// reads one sequence's keys).
#pragma once

#include <cstdint>
#include <vector>

namespace maestro {

// Blocks of `threads` for n independent elements, capped at max_blocks (the
// kernels are grid-stride loops); at least 1.
int64_t grid_blocks(int64_t n, int threads, int64_t max_blocks = 65535LL * 8);

// Rows [row0, row0 + rows) of one sequence whose keys are [seq_begin, seq_end).
struct AttentionTile {
  int32_t row0, rows, seq_begin, seq_end;
};
// cu_seqlens[n_seq + 1] -> tiles of at most rows_per_tile query rows, in
// token order; empty sequences give no tile. Throws std::invalid_argument
// for cu_seqlens that are not non-decreasing from 0.
std::vector<AttentionTile> plan_attention_tiles(const int32_t* cu_seqlens, int64_t n_seq, int rows_per_tile);

// Whether the fast attention kernels take head size D (each of a warp's 32
// lanes holds D/32 of a row, K/V tiles of 32 keys in shared memory).
constexpr int kFastAttentionMaxHead = 128;
inline bool fast_attention_supports(int64_t D) { return D > 0 && D <= kFastAttentionMaxHead; }

}  // namespace maestro
