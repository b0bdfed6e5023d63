// Launch geometry of the CUDA kernels (gpu/launch_plan.h), on the host.
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/launch_plan.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(launch_plan)

BOOST_AUTO_TEST_CASE(grid_blocks_cover_the_elements_within_the_cap) {
  BOOST_TEST(grid_blocks(0, 256) == 1);
  BOOST_TEST(grid_blocks(1, 256) == 1);
  BOOST_TEST(grid_blocks(256, 256) == 1);
  BOOST_TEST(grid_blocks(257, 256) == 2);
  BOOST_TEST(grid_blocks(int64_t(1) << 40, 256, 1024) == 1024);  // grid-stride beyond the cap
}

BOOST_AUTO_TEST_CASE(attention_tiles_stay_inside_their_sequence) {
  const std::vector<int32_t> cu = {0, 3, 3, 20, 21};  // lengths 3, 0, 17, 1
  const std::vector<AttentionTile> t = plan_attention_tiles(cu.data(), 4, 8);
  BOOST_TEST_REQUIRE(t.size() == 5u);  // 1 + 0 + 3 + 1
  const int expect[5][4] = {{0, 3, 0, 3}, {3, 8, 3, 20}, {11, 8, 3, 20}, {19, 1, 3, 20}, {20, 1, 20, 21}};
  for (size_t i = 0; i < t.size(); ++i) {
    BOOST_TEST(t[i].row0 == expect[i][0]);
    BOOST_TEST(t[i].rows == expect[i][1]);
    BOOST_TEST(t[i].seq_begin == expect[i][2]);
    BOOST_TEST(t[i].seq_end == expect[i][3]);
  }
  // every row exactly once, in token order
  int32_t next = 0;
  for (const AttentionTile& x : t) {
    BOOST_TEST(x.row0 == next);
    next += x.rows;
  }
  BOOST_TEST(next == 21);
}

BOOST_AUTO_TEST_CASE(bad_cu_seqlens_are_refused) {
  const std::vector<int32_t> down = {0, 5, 4}, late = {1, 5};
  BOOST_CHECK_THROW(plan_attention_tiles(down.data(), 2, 8), std::invalid_argument);
  BOOST_CHECK_THROW(plan_attention_tiles(late.data(), 1, 8), std::invalid_argument);
  BOOST_CHECK_THROW(plan_attention_tiles(late.data(), 1, 0), std::invalid_argument);
  BOOST_TEST(fast_attention_supports(64));
  BOOST_TEST(fast_attention_supports(128));
  BOOST_TEST(!fast_attention_supports(256));
}

BOOST_AUTO_TEST_CASE(attention_kernel_choice) {
  using P = AttentionPath;
  using K = AttentionKernel;
  const std::vector<int32_t> cu = {0, 3, 3, 300};
  BOOST_TEST(longest_sequence(cu.data(), 3) == 297);
  BOOST_TEST(longest_sequence(cu.data(), 0) == 0);
  // explicit paths are what they say
  BOOST_TEST((choose_attention(P::Reference, true, 64, 5000) == K::Batched));
  BOOST_TEST((choose_attention(P::TensorCore, false, 64, 5) == K::BatchedBf16));
  BOOST_TEST((choose_attention(P::Fast, true, 128, 5000) == K::Tiled));
  BOOST_CHECK_THROW(choose_attention(P::Fast, true, 256, 10), std::invalid_argument);
  // auto: tensor cores for long sequences with bf16 GEMMs, else the tiled kernel where it applies
  BOOST_TEST((choose_attention(P::Auto, true, 128, kTensorCoreMinLength) == K::BatchedBf16));
  BOOST_TEST((choose_attention(P::Auto, true, 128, kTensorCoreMinLength - 1) == K::Tiled));
  BOOST_TEST((choose_attention(P::Auto, false, 128, 4096) == K::Tiled));  // fp32 never rounds to bf16
  BOOST_TEST((choose_attention(P::Auto, false, 256, 10) == K::Batched));
  BOOST_TEST((choose_attention(P::Auto, true, 256, 10) == K::BatchedBf16));
}

// Under Auto a sequence whose [H, L, L] buffers would pass the budget takes
// the tiled kernel where the head size allows; explicit paths and head
// sizes the tiled kernel does not take are unchanged.
BOOST_AUTO_TEST_CASE(attention_scratch_over_the_budget_takes_the_tiled_kernel) {
  using P = AttentionPath;
  using K = AttentionKernel;
  BOOST_TEST(batched_attention_scratch_bytes(32, 4096, true) == int64_t(12) * 32 * 4096 * 4096);  // 6.4 GB
  BOOST_TEST(batched_attention_scratch_bytes(32, 4096, false) == int64_t(8) * 32 * 4096 * 4096);
  const int64_t need = batched_attention_scratch_bytes(32, 4096, true);
  BOOST_TEST((choose_attention(P::Auto, true, 128, 4096, 32, need) == K::BatchedBf16));  // exactly fits
  BOOST_TEST((choose_attention(P::Auto, true, 128, 4096, 32, need - 1) == K::Tiled));
  BOOST_TEST((choose_attention(P::Auto, true, 128, 4096, 32, 0) == K::BatchedBf16));  // no limit
  const int64_t h100 = int64_t(80e9) / 8;                                                // the default budget there
  BOOST_TEST((choose_attention(P::Auto, true, 128, 4096, 32, h100) == K::BatchedBf16));
  BOOST_TEST((choose_attention(P::Auto, true, 128, 16384, 32, h100) == K::Tiled));
  BOOST_TEST((choose_attention(P::Auto, true, 256, 16384, 32, h100) == K::BatchedBf16));  // no tiled kernel for D 256
  BOOST_TEST((choose_attention(P::Auto, false, 256, 16384, 32, h100) == K::Batched));
  BOOST_TEST((choose_attention(P::TensorCore, true, 128, 16384, 32, h100) == K::BatchedBf16));
  BOOST_TEST((choose_attention(P::Reference, true, 128, 16384, 32, h100) == K::Batched));
}

// Causal blocks: none below 2,048 tokens, then ~L/8 rounded up to 64, at least 1,024 rows.
BOOST_AUTO_TEST_CASE(causal_block_sizes) {
  BOOST_TEST(causal_block(1) == 0);
  BOOST_TEST(causal_block(1500) == 0);
  BOOST_TEST(causal_block(2 * kCausalBlockMin - 1) == 0);
  BOOST_TEST(causal_block(2 * kCausalBlockMin) == kCausalBlockMin);  // two blocks
  BOOST_TEST(causal_block(2048) == 1024);
  BOOST_TEST(causal_block(4096) == 1024);
  BOOST_TEST(causal_block(8192) == 1024);
  BOOST_TEST(causal_block(8200) == 1088);  // 1,025 rounded up to 64: still 8 blocks
  for (int64_t L : {2048, 3000, 4100, 8192, 32768}) {
    const int64_t b = causal_block(L), blocks = (L + b - 1) / b;
    BOOST_TEST(b % 64 == 0);
    BOOST_TEST(b >= kCausalBlockMin);
    BOOST_TEST((blocks >= 2 && blocks <= 8), "L " << L << ": " << blocks << " blocks");
  }
}

BOOST_AUTO_TEST_CASE(attention_paths_by_name_and_what_the_self_check_runs) {
  for (const AttentionPath path : {AttentionPath::Auto, AttentionPath::Fast, AttentionPath::TensorCore,
                                   AttentionPath::Reference, AttentionPath::Flash})
    BOOST_TEST((parse_attention_path(attention_path_name(path)) == path));
  BOOST_TEST(std::string(attention_path_name(AttentionPath::Fast)) == "tiled");
  BOOST_TEST(std::string(attention_path_name(AttentionPath::Flash)) == "flash");
  BOOST_TEST(!parse_attention_path("fast").has_value());
  auto checked = [](AttentionPath path, bool bf16) {
    const SelfCheckedAttention c = self_checked_attention(path, bf16);
    return std::tuple<bool, bool, bool>{c.tiled, c.tensor_core, c.flash};
  };
  using T = std::tuple<bool, bool, bool>;
  BOOST_TEST((checked(AttentionPath::Auto, true) == T{true, true, false}));  // auto never takes the flash kernels
  BOOST_TEST((checked(AttentionPath::Auto, false) == T{true, false, false}));  // nor the tensor cores in fp32
  BOOST_TEST((checked(AttentionPath::Fast, true) == T{true, false, false}));
  BOOST_TEST((checked(AttentionPath::TensorCore, true) == T{false, true, false}));
  BOOST_TEST((checked(AttentionPath::Reference, true) == T{false, false, false}));
  BOOST_TEST((checked(AttentionPath::Flash, true) == T{false, false, true}));
  // ... and what each runs: auto in fp32 never the tensor cores, at any length; auto never flash
  for (const int64_t L : {1, 255, 256, 5000}) {
    BOOST_TEST((choose_attention(AttentionPath::Auto, false, 256, L) != AttentionKernel::BatchedBf16));
    for (const bool bf16 : {false, true})
      BOOST_TEST((choose_attention(AttentionPath::Auto, bf16, 128, L, 16, 1) != AttentionKernel::Flash));
  }
  BOOST_TEST((choose_attention(AttentionPath::Flash, true, 128, 4096) == AttentionKernel::Flash));
  BOOST_TEST((choose_attention(AttentionPath::Flash, true, 8, 10) == AttentionKernel::Flash));
  BOOST_CHECK_THROW(choose_attention(AttentionPath::Flash, true, 256, 10), std::invalid_argument);
}

// The flash kernels' shared memory (gpu/cuda/flash_attention.cu): every
// row ldmatrix reads must start 16-byte aligned, a matrix's 8 rows must
// fall in different banks, and each kernel must fit a block of an
// sm_86/sm_89 GPU (99 KiB), the smallest of the sm_80+ parts.
BOOST_AUTO_TEST_CASE(the_flash_kernels_shared_memory_is_aligned_and_fits) {
  BOOST_TEST(flash_padded_head(1) == 64);
  BOOST_TEST(flash_padded_head(64) == 64);
  BOOST_TEST(flash_padded_head(65) == 128);
  BOOST_TEST(flash_padded_head(128) == 128);
  BOOST_TEST(flash_attention_supports(128));
  BOOST_TEST(!flash_attention_supports(129));
  BOOST_TEST(!flash_attention_supports(0));
  static_assert(kFlashRows == 16 * kFlashWarps, "16 rows per warp");
  static_assert(kFlashForwardRows % (16 * kFlashWarps) == 0, "whole tiles of 16 rows per warp");
  static_assert(kFlashCols % 16 == 0, "the walked tiles: whole k-steps of 16");
  for (const int64_t Dp : {64, 128}) {
    const FlashLayout l = flash_layout(Dp);
    // ldmatrix: every row 16-byte aligned, and the 8 rows of a matrix in 8
    // different groups of 4 banks (a row stride of 4 mod 32 words)
    BOOST_TEST((l.ldh * 2) % 16 == 0);
    BOOST_TEST((l.ldh * 2 / 4) % 32 == 4);
    BOOST_TEST(l.ldh >= Dp);
    // every tile starts 16-byte aligned
    for (const int64_t rows : {kFlashForwardRows, kFlashRows, kFlashCols}) BOOST_TEST(l.tile(rows) % 16 == 0);
    BOOST_TEST(l.max_bytes() <= 99 * 1024);
  }
  const FlashLayout l = flash_layout(128);
  BOOST_TEST(l.forward_bytes() == (128 + 4 * 32) * 136 * 2);
  BOOST_TEST(l.backward_bytes() == (2 * 64 + 4 * 32) * 136 * 2);
  BOOST_TEST(l.max_bytes() == 69632);
}

BOOST_AUTO_TEST_CASE(rows_grouped_by_token_keep_row_order) {
  const std::vector<int32_t> tokens = {7, 2, 7, 0, 2, 7};
  const TokenRows g = group_rows_by_token(tokens.data(), 6);
  BOOST_TEST(g.distinct == 3);
  // [offsets (U + 1) | tokens (U) | rows (N)]
  const std::vector<int32_t> want = {0, 1, 3, 6, /**/ 0, 2, 7, /**/ 3, 1, 4, 0, 2, 5};
  BOOST_TEST(g.packed == want, boost::test_tools::per_element());
  const TokenRows none = group_rows_by_token(nullptr, 0);
  BOOST_TEST(none.distinct == 0);
  BOOST_TEST(none.packed == std::vector<int32_t>{0}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(column_sums_split_rows_into_chunks) {
  BOOST_TEST(column_chunks(0) == 0);
  BOOST_TEST(column_chunks(1) == 1);
  BOOST_TEST(column_chunks(kColumnRows) == 1);
  BOOST_TEST(column_chunks(kColumnRows + 1) == 2);
  BOOST_TEST(column_chunks(4096) == 16);
}

BOOST_AUTO_TEST_SUITE_END()
