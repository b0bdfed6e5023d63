// Launch geometry (launch_plan.h).
#include "gpu/launch_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace maestro {

int64_t grid_blocks(int64_t n, int threads, int64_t max_blocks) {
  return std::clamp<int64_t>((n + threads - 1) / threads, 1, max_blocks);
}

TokenRows group_rows_by_token(const int32_t* tokens, int64_t N) {
  std::vector<int32_t> rows(size_t(N), 0);
  for (int64_t i = 0; i < N; ++i) rows[size_t(i)] = int32_t(i);
  std::stable_sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  std::vector<int32_t> offsets{0}, distinct;
  for (int64_t k = 0; k < N; ++k) {
    if (k > 0 && tokens[rows[size_t(k)]] == tokens[rows[size_t(k - 1)]]) continue;
    if (k > 0) offsets.push_back(int32_t(k));
    distinct.push_back(tokens[rows[size_t(k)]]);
  }
  if (N > 0) offsets.push_back(int32_t(N));
  TokenRows out;
  out.distinct = int64_t(distinct.size());
  out.packed = std::move(offsets);
  out.packed.insert(out.packed.end(), distinct.begin(), distinct.end());
  out.packed.insert(out.packed.end(), rows.begin(), rows.end());
  return out;
}

std::vector<AttentionTile> plan_attention_tiles(const int32_t* cu, int64_t n_seq, int rows_per_tile) {
  if (rows_per_tile <= 0) throw std::invalid_argument("plan_attention_tiles: rows_per_tile must be positive");
  if (n_seq > 0 && cu[0] != 0) throw std::invalid_argument("plan_attention_tiles: cu_seqlens[0] must be 0");
  std::vector<AttentionTile> tiles;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int32_t b = cu[s], e = cu[s + 1];
    if (e < b)
      throw std::invalid_argument("plan_attention_tiles: cu_seqlens decreases at sequence " + std::to_string(s));
    for (int32_t r = b; r < e; r += rows_per_tile) tiles.push_back({r, std::min(rows_per_tile, e - r), b, e});
  }
  return tiles;
}

int64_t batched_attention_scratch_bytes(int64_t H, int64_t L, bool bf16) {
  return (bf16 ? 12 : 8) * H * L * L;
}

std::optional<AttentionPath> parse_attention_path(std::string_view name) {
  for (const AttentionPath p : {AttentionPath::Auto, AttentionPath::Fast, AttentionPath::TensorCore,
                                AttentionPath::Reference, AttentionPath::Flash})
    if (name == attention_path_name(p)) return p;
  return std::nullopt;
}

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::Auto: return "auto";
    case AttentionPath::Fast: return "tiled";
    case AttentionPath::TensorCore: return "tensorcore";
    case AttentionPath::Reference: return "reference";
    case AttentionPath::Flash: return "flash";
  }
  return "?";
}

SelfCheckedAttention self_checked_attention(AttentionPath path, bool bf16_gemm) {
  switch (path) {
    case AttentionPath::Auto: return {true, bf16_gemm, false};
    case AttentionPath::Fast: return {true, false, false};
    case AttentionPath::TensorCore: return {false, true, false};
    case AttentionPath::Reference: return {false, false, false};
    case AttentionPath::Flash: return {false, false, true};
  }
  return {true, true, true};
}

AttentionKernel choose_attention(AttentionPath path, bool bf16_gemm, int64_t D, int64_t longest, int64_t H,
                                 int64_t scratch_budget) {
  switch (path) {
    case AttentionPath::Reference:
      return AttentionKernel::Batched;
    case AttentionPath::TensorCore:
      return AttentionKernel::BatchedBf16;
    case AttentionPath::Fast:
      if (!fast_attention_supports(D))
        throw std::invalid_argument("the fast attention path takes head sizes up to " +
                                    std::to_string(kFastAttentionMaxHead) + ", not " + std::to_string(D));
      return AttentionKernel::Tiled;
    case AttentionPath::Flash:
      if (!flash_attention_supports(D))
        throw std::invalid_argument("the flash attention path takes head sizes up to " + std::to_string(kFlashMaxHead) +
                                    ", not " + std::to_string(D));
      return AttentionKernel::Flash;
    case AttentionPath::Auto:
      break;
  }
  if (scratch_budget > 0 && fast_attention_supports(D) &&
      batched_attention_scratch_bytes(H, longest, bf16_gemm) > scratch_budget)
    return AttentionKernel::Tiled;
  if (bf16_gemm && longest >= kTensorCoreMinLength) return AttentionKernel::BatchedBf16;
  if (fast_attention_supports(D)) return AttentionKernel::Tiled;
  return bf16_gemm ? AttentionKernel::BatchedBf16 : AttentionKernel::Batched;
}

int64_t causal_block(int64_t L) {
  if (L < 2 * kCausalBlockMin) return 0;
  const int64_t eighth = (L + 7) / 8;
  return std::max(kCausalBlockMin, (eighth + 63) / 64 * 64);
}

int64_t longest_sequence(const int32_t* cu, int64_t n_seq) {
  int64_t longest = 0;
  for (int64_t s = 0; s < n_seq; ++s) longest = std::max<int64_t>(longest, cu[s + 1] - cu[s]);
  return longest;
}

}  // namespace maestro
