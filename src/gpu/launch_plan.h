// Launch geometry of the CUDA backend's kernels, host code only so it is
// unit-tested here (tests/gpu/launch_plan_test.cpp): grid sizes, and the
// query tiles of the fast attention kernel over packed variable-length
// sequences (a tile never crosses a sequence boundary, so a thread block
// reads one sequence's keys).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace maestro {

// Blocks of `threads` for n independent elements, capped at max_blocks (the
// kernels are grid-stride loops); at least 1.
int64_t grid_blocks(int64_t n, int threads, int64_t max_blocks = 65535LL * 8);

// Column sums over rows (weight gradients: norms' dw, db, a bias): chunks of
// kColumnRows rows, each chunk's sums to scratch, then added to the
// gradient in chunk order — no atomics, the same bits on every run.
constexpr int64_t kColumnRows = 256;
inline int64_t column_chunks(int64_t N) { return (N + kColumnRows - 1) / kColumnRows; }

// The embedding backward's rows grouped by token, so that one thread per
// (token, column) adds that token's rows in row order — the CPU backend's
// order, with no atomics: `tokens` the distinct tokens (ascending),
// rows[offsets[u], offsets[u + 1]) the rows of tokens[u], ascending. Packed
// for one upload as [offsets (U + 1) | tokens (U) | rows (N)].
struct TokenRows {
  int64_t distinct = 0;        // U
  std::vector<int32_t> packed;  // [2U + 1 + N]
};
TokenRows group_rows_by_token(const int32_t* tokens, int64_t N);

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

// The flash kernels (gpu/cuda/flash_attention.cu): the online softmax of
// the tiled kernel with its products on the tensor cores (mma.sync
// m16n8k16, bf16 operands, fp32 sums; gpu/cuda/flash_ptx.cuh), the scores
// kept in registers, and no [H, L, L] buffer. A block of kFlashWarps warps
// owns rows of one sequence — kFlashForwardRows query rows in the forward,
// 32 per warp (two tiles of 16 that share each K and V fragment);
// kFlashRows query rows (dq) or key rows (dk, dv) in the backward, 16 per
// warp, whose gradients' accumulators leave no registers for two — and
// walks the other side in tiles of kFlashCols, each copied in (cp.async)
// while the block computes on the one before. Head sizes up to
// kFlashMaxHead, padded with zeros to flash_padded_head (64 or 128: the
// kernels' fragment counts).
constexpr int kFlashWarps = 4, kFlashForwardRows = 32 * kFlashWarps, kFlashRows = 16 * kFlashWarps,
              kFlashCols = 32;
constexpr int64_t kFlashMaxHead = 128;
inline bool flash_attention_supports(int64_t D) { return D > 0 && D <= kFlashMaxHead; }
constexpr int64_t flash_padded_head(int64_t D) { return D <= 64 ? 64 : 128; }
// Shared memory of the flash kernels for padded head size Dp: bf16 tiles
// of rows ldh = Dp + 8 elements long (16-byte aligned rows, as ldmatrix and
// cp.async want; the 8 rows of a fragment in 8 different groups of 4
// banks), the walked side's in two stages.
//   forward: Q [forward rows] | 2 × (K, V [cols])
//   dq:      Q, dO [rows] | 2 × (K, V [cols])
//   dk, dv:  K, V [rows] | 2 × (Q, dO [cols])
struct FlashLayout {
  int64_t head, ldh;  // Dp; the bf16 tiles' row stride (elements)
  constexpr int64_t tile(int64_t rows) const { return rows * ldh * 2; }
  constexpr int64_t forward_bytes() const { return tile(kFlashForwardRows) + 2 * 2 * tile(kFlashCols); }
  constexpr int64_t backward_bytes() const { return 2 * tile(kFlashRows) + 2 * 2 * tile(kFlashCols); }
  constexpr int64_t max_bytes() const { return forward_bytes() > backward_bytes() ? forward_bytes() : backward_bytes(); }
};
constexpr FlashLayout flash_layout(int64_t Dp) { return FlashLayout{Dp, Dp + 8}; }

// The attention a backend is asked for: Auto (it chooses), Fast (the tiled
// online-softmax kernel), Reference (fp32 cuBLAS batched, the oracle),
// TensorCore (the reference path's GEMMs with bf16 operands), Flash (the
// flash kernels above; Auto does not take it before it has been measured
// on a GPU).
enum class AttentionPath { Auto, Fast, Reference, TensorCore, Flash };
// What runs: the tiled kernel, the per-sequence batched GEMMs in fp32 or
// bf16, or the flash kernels.
enum class AttentionKernel { Tiled, Batched, BatchedBf16, Flash };
// The names `--gpu-attention` takes: auto, tiled (Fast), tensorcore,
// reference, flash; nullopt for any other.
std::optional<AttentionPath> parse_attention_path(std::string_view name);
const char* attention_path_name(AttentionPath path);
// The attention kernels a run on `path` may call, which the start-up
// self-check (gpu/cuda/self_check.h) runs against the reference path: the
// tiled kernel unless the path is tensorcore or reference; the tensor-core
// path under auto with bf16 GEMMs (auto never takes it in fp32) or when
// asked for. A kernel the run never calls cannot refuse it.
struct SelfCheckedAttention {
  bool tiled = false, tensor_core = false, flash = false;
};
SelfCheckedAttention self_checked_attention(AttentionPath path, bool bf16_gemm);
// Sequences at least this long take the tensor cores under Auto with bf16
// GEMMs: there the batched GEMMs' [H,L,L] traffic costs less than the tiled
// kernel's fp32 arithmetic on CUDA cores; shorter ones take the tiled kernel
// (one launch for every sequence, against a few cuBLAS calls per sequence).
constexpr int64_t kTensorCoreMinLength = 256;
// Device memory the batched paths take for one sequence of L tokens and H
// query heads, [H, L, L] each: the fp32 scores and score gradients, and on
// the tensor-core path their bf16 copies (P, dS). 12·H·L² bytes with bf16:
// 6.4 GB for 32 heads at 4,096 tokens, 103 GB at 16,384.
int64_t batched_attention_scratch_bytes(int64_t H, int64_t L, bool bf16);
// Throws std::invalid_argument for Fast or Flash with a head size it does not take.
// Under Auto a sequence whose batched scratch would pass `scratch_budget`
// bytes (0: no limit) takes the tiled kernel, which keeps no [H, L, L]
// buffer, where the head size allows: a long context runs slower instead
// of running out of memory.
AttentionKernel choose_attention(AttentionPath path, bool bf16_gemm, int64_t D, int64_t longest_sequence,
                                 int64_t H = 1, int64_t scratch_budget = 0);
int64_t longest_sequence(const int32_t* cu_seqlens, int64_t n_seq);
// The query-row block of a causal sequence's batched attention GEMMs
// (gemm_plan.h, "Causal blocks"): 0 (the whole square) below 2,048 tokens,
// else about L/8 rounded up to 64 and at least kCausalBlockMin rows, so a
// sequence of 2,048 tokens takes 2 blocks of 1,024 (75 % of the square's
// multiply-adds) and every GEMM stays large enough for the tensor cores.
// Measured on an H200 (docs/PERFORMANCE.md §6): at 2,048 tokens blocks of
// 1,024 rows beat 512, 512 beat the whole square, and 256 and 128 lost to it.
constexpr int64_t kCausalBlockMin = 1024;
int64_t causal_block(int64_t L);

}  // namespace maestro
