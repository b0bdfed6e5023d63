// The CUDA backend on the CPU: cuda_backend.cpp and the real sources of
// src/gpu/cuda/*.cu, run by the emulator (emulator/cuda_emulator.h) over
// its CUDA runtime and cuBLAS(Lt) — against the CPU backend, through the
// comparison the GPU's start-up self-check and bench/gpu's op check make
// (gpu/backend_compare.h): every op family in fp32 and in bf16, each
// attention path (tiled, batched fp32, tensor cores with and without causal
// blocks, flash), with warps and lanes resumed in order and in reverse; the
// self-check itself; a hand-off between two devices; and a transformer's
// loss and gradients against the CPU engine. Then the emulator itself: it
// must catch what the hardware would not forgive.
#define BOOST_TEST_MODULE gpu_kernels
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cuda_emulator.h"
#include "dsl/frontend.h"
#include "gpu/cuda/flash_ptx.cuh"  // after cuda_emulator.h: the emulator's versions
#include "gpu/backend_compare.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/self_check.h"
#include "nn/section_model.h"
#include "support/random_vector.h"
#include "support/rel_err.h"

using namespace maestro;

namespace {

constexpr double kF32 = 1e-5;  // the fp32 bound against the CPU backend
// bf16: bench/gpu's op check's bounds (bench/gpu/gpu_bench.cpp, run_ops)
constexpr double kBf16 = 1e-2, kBf16Gemm = 2e-2, kBf16Attention = kSelfCheckTensorCoreAttentionTolerance;

struct Schedules {
  emu::Schedule s;
  const char* name;
} const kSchedules[] = {{emu::Schedule::ThreadOrder, "in order"}, {emu::Schedule::Reverse, "reverse"}};

struct ScheduleGuard {
  explicit ScheduleGuard(emu::Schedule s) { emu::set_schedule(s); }
  ~ScheduleGuard() { emu::set_schedule(emu::Schedule::ThreadOrder); }
};

std::unique_ptr<Backend> cuda(bool bf16, AttentionPath attention, int64_t causal_block = 0, int device = 0) {
  CudaBackendOptions o;
  o.device = device;
  o.bf16_gemm = bf16;
  o.attention = attention;
  o.causal_block = causal_block;
  o.min_segment_bytes = size_t(64) << 20;
  return make_cuda_backend(o);
}

// A 2-layer transformer section (hidden 128, GQA 4 heads over 2) in `precision`.
Program program_of(const char* precision) {
  Diagnostics diags;
  std::optional<Program> p = load_program_text(
      std::string("section llm { model = transformer(layers: 2, hidden: 128, heads: 4, kv_heads: 2, ffn: 256, "
                  "vocab: 96, max_seq: 80); consumes = [text]; loss = cross_entropy; }\n"
                  "data { source = synthetic(seed: 1); mix { text = 1.0; } text_tokens = 80; }\n"
                  "train { global_batch = 2; steps = 1; optimizer = adamw(lr: 1e-3); precision = ") +
          precision + "; }\n",
      "model.sect", diags);
  BOOST_TEST_REQUIRE(p.has_value());
  return *p;
}

void expect_all_ok(const std::vector<OpCheck>& checks, const std::string& what) {
  BOOST_TEST_REQUIRE(!checks.empty());
  for (const OpCheck& c : checks) {
    BOOST_TEST_MESSAGE(what << ": " << c.op << " rel_err " << c.rel_err << " (<= " << c.tolerance << ")");
    BOOST_TEST(c.ok(), what << ": " << c.op << " rel_err " << c.rel_err << " > " << c.tolerance);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_cuda_backend)

BOOST_AUTO_TEST_CASE(every_op_matches_the_cpu_backend_in_fp32) {
  for (const auto& [schedule, name] : kSchedules) {
    ScheduleGuard guard(schedule);
    auto gpu = cuda(false, AttentionPath::Fast);
    auto cpu = make_cpu_backend(1);
    emu::reset_counts();
    for (const std::string& family : compared_op_families()) {
      CompareOptions o;
      o.tolerance = o.gemm_tolerance = kF32;
      o.ops = {family};
      const auto t0 = std::chrono::steady_clock::now();
      expect_all_ok(compare_backends(*gpu, *cpu, o), std::string("fp32, tiled attention, ") + name);
      BOOST_TEST_MESSAGE(family << ": " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                                << " s");
    }
    const emu::Counts n = emu::counts();
    BOOST_TEST_MESSAGE(name << ": " << n.launches << " launches, " << n.blocks << " blocks, " << n.block_barriers
                            << " block barriers, " << n.warp_barriers << " warp barriers");
    BOOST_TEST(n.launches > 50u);
    BOOST_TEST(n.block_barriers > 0u);
    BOOST_TEST(n.warp_barriers > 0u);
  }
}

// The start-up self-check as a GPU runs it (fast kernels against the
// reference path on the same device), for each attention it may check.
BOOST_AUTO_TEST_CASE(the_start_up_self_check_passes) {
  for (AttentionPath a : {AttentionPath::Auto, AttentionPath::Flash}) {
    const std::vector<OpCheck> checks = gpu_self_check(0, true, true, a);
    expect_all_ok(checks, std::string("self-check, ") + (a == AttentionPath::Flash ? "flash" : "auto"));
  }
}

// A hand-off left in one GPU's memory read by a backend of another (peer
// copies), as the self-check checks two backends of one device.
BOOST_AUTO_TEST_CASE(a_hand_off_between_two_devices_keeps_its_bytes) {
  emu::set_device_count(2);
  auto producer = cuda(true, AttentionPath::Auto, 0, 0), consumer = cuda(true, AttentionPath::Auto, 0, 1);
  expect_all_ok(check_handoff_copies(*producer, *consumer), "device 0 -> 1");
  emu::set_device_count(1);
}

// A whole transformer section — the engine's own calls, in its order, the
// bf16 copies of its linear operands included — on the CUDA backend
// against the CPU engine: the loss and every gradient of one forward and
// backward (bench/gpu's "model" check, here), and the loss after an AdamW
// step.
BOOST_AUTO_TEST_CASE(a_transformer_s_loss_and_gradients_match_the_cpu_engine) {
  std::vector<std::vector<int32_t>> ids(2);  // two lengths: two tiles' ends
  for (int32_t t = 0; t < 80; ++t) ids[0].push_back((t * 37 + 5) % 96);
  for (int32_t t = 0; t < 45; ++t) ids[1].push_back((t * 11 + 3) % 96);
  std::vector<SampleInput> in(2);
  for (size_t s = 0; s < 2; ++s) in[s].tokens = ids[s];
  const int64_t n_global = 79 + 44;
  // The loss and gradients of one forward and backward; then an AdamW step
  // (on the CUDA backend in bf16 it writes the weights' bf16 copy, which the
  // next forward's GEMMs read: every tensor here is a multiple of 128
  // elements, so the copy is laid out like the weights, docs/engine.md) and
  // the loss of a second forward.
  struct Result {
    double loss, loss_after_step;
    std::vector<float> grads;
  };
  auto run = [&](const Program& program, Backend& b) {
    SectionModel model(program.sections[0], b, 1);
    Result r;
    model.zero_grads();
    ForwardOutput out = model.forward(in);
    r.loss = model.loss(*out.context, {}, n_global);
    model.backward(*out.context, {});
    r.grads.resize(model.grad_count());
    b.copy_to_host(r.grads.data(), model.grads(), r.grads.size() * sizeof(float));
    model.adamw_step(program.train.optimizer, 1e-2);
    ForwardOutput again = model.forward(in);
    r.loss_after_step = model.loss(*again.context, {}, n_global);
    return r;
  };
  const Program fp32 = program_of("fp32"), bf16 = program_of("bf16");
  auto cpu = make_cpu_backend(1);
  const Result want = run(fp32, *cpu);
  const double step_change = std::abs(want.loss_after_step - want.loss);
  BOOST_TEST_MESSAGE("cpu: loss " << want.loss << ", after a step " << want.loss_after_step);
  struct Case {
    bool bf16;
    AttentionPath attention;
    double tolerance;
    const char* name;
  } const cases[] = {{false, AttentionPath::Fast, 1e-4, "fp32, tiled"},
                     {false, AttentionPath::Reference, 1e-4, "fp32, batched"},
                     {true, AttentionPath::TensorCore, 5e-2, "bf16, tensor cores"},
                     {true, AttentionPath::Flash, 5e-2, "bf16, flash"}};
  for (const Case& c : cases) {
    auto gpu = cuda(c.bf16, c.attention);
    const Result got = run(c.bf16 ? bf16 : fp32, *gpu);
    const double loss_err = std::abs(got.loss - want.loss) / std::abs(want.loss),
                 grad_err = test_support::max_rel_err(got.grads, want.grads),
                 step_err = std::abs(got.loss_after_step - want.loss_after_step);
    BOOST_TEST_MESSAGE(c.name << ": loss " << got.loss << " (rel " << loss_err << "), gradients rel_err " << grad_err
                              << ", after a step " << got.loss_after_step << " (off by " << step_err / step_change
                              << " of the step's change " << step_change << ")");
    BOOST_TEST(loss_err <= c.tolerance, c.name << ": loss rel_err " << loss_err);
    BOOST_TEST(grad_err <= c.tolerance, c.name << ": gradients rel_err " << grad_err);
    // The step moved the loss by step_change; a stale bf16 copy of the
    // weights would leave the second forward that far off.
    BOOST_TEST(step_err <= (c.bf16 ? 0.02 : 1e-3) * step_change, c.name << ": after a step, off by " << step_err);
  }
}

// The op profile (CudaBackendOptions::profile_ops): a training step of the
// transformer above, each op of the engine timed once per call — the
// calls counted as the engine makes them (an op inside another, none
// twice), taken and reset by cuda_backend_op_times; none without it.
BOOST_AUTO_TEST_CASE(the_op_profile_counts_each_op_of_a_step) {
  const Program program = program_of("bf16");
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < 60; ++t) ids.push_back((t * 37 + 5) % 96);
  std::vector<SampleInput> in(1);
  in[0].tokens = ids;
  for (const bool profiled : {true, false}) {
    CudaBackendOptions o;
    o.min_segment_bytes = size_t(64) << 20;
    o.profile_ops = profiled;
    auto gpu = make_cuda_backend(o);
    SectionModel model(program.sections[0], *gpu, 1);
    model.zero_grads();
    (void)model.grad_sq_norm();  // the parameters' bf16 copy refreshed: not part of the step below
    (void)cuda_backend_op_times(*gpu);
    model.zero_grads();
    ForwardOutput out = model.forward(in);
    (void)model.loss(*out.context, {}, 59);
    model.backward(*out.context, {});
    model.adamw_step(program.train.optimizer, 1e-3);
    const std::vector<OpTime> times = cuda_backend_op_times(*gpu);
    if (!profiled) {
      BOOST_TEST(times.empty());
      continue;
    }
    std::map<std::string, int64_t> calls;
    double total = 0;
    for (const OpTime& t : times) {
      BOOST_TEST_MESSAGE(t.op << ": " << t.calls << " calls, " << t.ms << " ms");
      BOOST_TEST(t.ms >= 0.0);
      calls[t.op] = t.calls;
      total += t.ms;
    }
    BOOST_TEST(total > 0.0);
    for (size_t i = 1; i < times.size(); ++i) BOOST_TEST(times[i - 1].ms >= times[i].ms);  // the most first
    // per layer: q, k, v, o, gate, up, down; and the head
    BOOST_TEST(calls["linear_forward"] == 2 * 7 + 1);
    BOOST_TEST(calls["linear_backward"] == 2 * 7 + 1);
    BOOST_TEST(calls["rmsnorm_forward"] == 2 * 2 + 1);  // two a layer and the final norm
    BOOST_TEST(calls["rope_forward"] == 2 * 2);
    BOOST_TEST(calls["rope_backward"] == 2 * 2);
    BOOST_TEST(calls["attention_forward"] == 2);
    BOOST_TEST(calls["attention_backward"] == 2);
    BOOST_TEST(calls["swiglu_forward"] == 2);
    BOOST_TEST(calls["swiglu_backward"] == 2);
    BOOST_TEST(calls["cross_entropy"] == 1);
    BOOST_TEST(calls.count("zero_scalars") == 0u);  // the loss's own, inside cross_entropy: counted there
    BOOST_TEST(calls["adamw"] >= 1);
    BOOST_TEST(calls.count("copy_to_host") == 1u);  // the loss read back
    BOOST_TEST(cuda_backend_op_times(*gpu).empty());  // taken: reset
  }
}

BOOST_AUTO_TEST_SUITE_END()

// The attention paths apart (a ctest of their own: unit.gpu_kernels.emulated_attention).
BOOST_AUTO_TEST_SUITE(emulated_attention)

// Every op in bf16 (bf16 GEMM operands, the engine's copies or rounded per
// call), and each attention path, against the CPU backend.
BOOST_AUTO_TEST_CASE(every_attention_path_and_bf16_match_the_cpu_backend) {
  struct Path {
    bool bf16;
    AttentionPath attention;
    int64_t block;
    bool every_family;  // every op family, in order; else the attention's
    const char* name;
    bool reverse = true;  // also with the threads in reverse order
  } const paths[] = {{false, AttentionPath::Reference, 0, false, "fp32, batched attention"},
                     {true, AttentionPath::TensorCore, 0, true, "bf16, tensor-core attention"},
                     {true, AttentionPath::TensorCore, 32, false, "bf16, tensor cores in causal blocks of 32"},
                     {true, AttentionPath::Flash, 0, false, "bf16, flash attention"},
                     // the fp32 kernels (run in both orders above and in fp32) at bf16: q, k, v in
                     // bf16 alone widened for them
                     {true, AttentionPath::Reference, 0, false, "bf16, fp32 batched attention", false},
                     {true, AttentionPath::Fast, 0, false, "bf16, tiled attention", false}};
  for (const Path& p : paths)
    for (const auto& [schedule, name] : kSchedules) {
      if (!p.reverse && schedule == emu::Schedule::Reverse) continue;
      ScheduleGuard guard(schedule);
      auto gpu = cuda(p.bf16, p.attention, p.block);
      auto cpu = make_cpu_backend(1);
      CompareOptions o;
      o.tolerance = p.bf16 ? kBf16 : kF32;
      o.gemm_tolerance = p.bf16 ? kBf16Gemm : kF32;
      o.attention_tolerance = p.bf16 ? kBf16Attention : kF32;
      if (!p.every_family || schedule == emu::Schedule::Reverse) o.ops = {"attention"};
      expect_all_ok(compare_backends(*gpu, *cpu, o), std::string(p.name) + ", " + name);
    }
}

// A head size that is not a multiple of 8 (the flash kernels' scalar
// loads, padded to 64), GQA 6 query heads over 2, causal and not, over
// sequences that cross the 64-row blocks and 32-key tiles.
BOOST_AUTO_TEST_CASE(the_flash_kernels_take_a_head_of_24) {
  const int64_t H = 6, KV = 2, D = 24;
  const std::vector<int32_t> cu = {0, 70, 70, 167, 170};
  const int64_t n_seq = 4, N = cu.back();
  using V = std::vector<float>;
  const V q = test_support::random_normal(size_t(N * H * D), 11),
          k = test_support::random_normal(size_t(N * KV * D), 12),
          v = test_support::random_normal(size_t(N * KV * D), 13),
          dout = test_support::random_normal(size_t(N * H * D), 14);
  for (bool causal : {true, false}) {
    auto run = [&](Backend& b, V& out, V& lse, V& dq, V& dk, V& dv) {
      auto up = [&](const V& h) {
        float* d = b.allocate(h.size());
        b.copy_from_host(d, h.data(), h.size() * sizeof(float));
        return d;
      };
      float *dq_ = up(V(q.size())), *dk_ = up(V(k.size())), *dv_ = up(V(v.size())), *q_ = up(q), *k_ = up(k),
            *v_ = up(v), *do_ = up(dout), *out_ = up(V(q.size())), *lse_ = up(V(size_t(N * H)));
      b.attention_forward(out_, lse_, q_, k_, v_, cu.data(), n_seq, N, H, KV, D, causal);
      b.attention_backward(dq_, dk_, dv_, do_, out_, lse_, q_, k_, v_, cu.data(), n_seq, N, H, KV, D, causal);
      auto down = [&](float* d, V& h) { b.copy_to_host(h.data(), d, h.size() * sizeof(float)); };
      out.resize(q.size()), lse.resize(size_t(N * H)), dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size());
      down(out_, out), down(lse_, lse), down(dq_, dq), down(dk_, dk), down(dv_, dv);
      for (float* p : {dq_, dk_, dv_, q_, k_, v_, do_, out_, lse_}) b.release(p);
    };
    auto gpu = cuda(true, AttentionPath::Flash);
    auto cpu = make_cpu_backend(1);
    V o1, l1, q1, k1, v1, o2, l2, q2, k2, v2;
    run(*gpu, o1, l1, q1, k1, v1);
    run(*cpu, o2, l2, q2, k2, v2);
    const char* what = causal ? "causal" : "bidirectional";
    for (const auto& [name, a, b] :
         {std::tuple{"out", &o1, &o2}, std::tuple{"lse", &l1, &l2}, std::tuple{"dq", &q1, &q2},
          std::tuple{"dk", &k1, &k2}, std::tuple{"dv", &v1, &v2}}) {
      const double e = test_support::max_rel_err(*a, *b);
      BOOST_TEST_MESSAGE("flash head 24, " << what << ": " << name << " rel_err " << e);
      BOOST_TEST(e <= kBf16Attention, what << ": " << name << " rel_err " << e);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// The emulator must catch what a GPU would not forgive, or it proves nothing.
namespace {

// Each thread writes its slot of shared memory, then reads the mirror slot.
void mirror_kernel(float* out, bool barrier) {
  float* s = reinterpret_cast<float*>(emu::dynamic_shared());
  s[threadIdx.x] = float(threadIdx.x);
  if (barrier) __syncthreads();
  out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}
void divergent_barrier_kernel() {
  if (threadIdx.x < 32) __syncthreads();
}
namespace warp = maestro::cuda_detail::warp;
void ldmatrix_kernel(int offset_bytes) {
  uint32_t r[4];
  warp::ldmatrix_x4(r, emu::dynamic_shared() + offset_bytes + 16 * (threadIdx.x % 32));
}

// The PTX ISA's fragments of mma.m16n8k16 (flash_ptx.cuh's comment): lane
// L, g = L/4, t = L%4. `tiles` (bf16, rows of kLd) holds A [16][16], B
// [16 k][16 n] and Bᵀ [16 n][16 k]; copied into shared memory. Each lane
// writes what ldmatrix gave it, regs[12·L..]: A | B from Bᵀ plain | B
// transposed; and its share of A·B for the n-tiles 0..7 and 8..15,
// d_out[8·L..]: d[4] of each.
constexpr int kLd = 24;
void fragments_kernel(const __nv_bfloat16* tiles, uint32_t* regs, float* d_out) {
  auto* smem = reinterpret_cast<__nv_bfloat16*>(emu::dynamic_shared());
  for (int e = int(threadIdx.x); e < 48 * kLd; e += 32) smem[e] = tiles[e];
  __syncthreads();
  const auto* A = smem;
  const auto* B = A + 16 * kLd;   // [k][n]
  const auto* Bt = B + 16 * kLd;  // [n][k]
  const int lane = int(threadIdx.x), i = lane / 8;
  uint32_t a[4], b[4], bt[4];
  warp::ldmatrix_x4(a, A + ((i % 2) * 8 + lane % 8) * kLd + (i / 2) * 8);
  warp::ldmatrix_x4(b, Bt + ((i / 2) * 8 + lane % 8) * kLd + (i % 2) * 8);
  warp::ldmatrix_x4_trans(bt, B + ((i % 2) * 8 + lane % 8) * kLd + (i / 2) * 8);
  float d[2][4] = {};
  const uint32_t lo[2] = {b[0], b[1]}, hi[2] = {b[2], b[3]};
  warp::mma_bf16_16816(d[0], a, lo);
  warp::mma_bf16_16816(d[1], a, hi);
  for (int e = 0; e < 4; ++e) {
    regs[12 * lane + e] = a[e];
    regs[12 * lane + 4 + e] = b[e];
    regs[12 * lane + 8 + e] = bt[e];
    d_out[8 * lane + e] = d[0][e];
    d_out[8 * lane + 4 + e] = d[1][e];
  }
}

// Each thread copies its 16 bytes in by cp.async and reads them back
// before and after the wait.
void async_copy_kernel(const float* src, float* before, float* after) {
  float* s = reinterpret_cast<float*>(emu::dynamic_shared());
  const int i = int(threadIdx.x);
  warp::cp_async16(s + 4 * i, src + 4 * i, i % 2 == 0);  // odd threads: zeros
  warp::cp_async_commit();
  before[i] = s[4 * i];
  warp::cp_async_wait<0>();
  after[i] = s[4 * i];
}
void shared_kernel(int* ran) { *ran = 1; }

}  // namespace

BOOST_AUTO_TEST_SUITE(kernel_emulator)

BOOST_AUTO_TEST_CASE(a_missing_barrier_reads_unwritten_shared_memory) {
  std::vector<float> out(64);
  emu::launch(mirror_kernel, "mirror", 1, 64, 64 * sizeof(float))(out.data(), true);
  for (int i = 0; i < 64; ++i) BOOST_TEST(out[size_t(i)] == float(63 - i));
  emu::launch(mirror_kernel, "mirror", 1, 64, 64 * sizeof(float))(out.data(), false);
  BOOST_TEST(std::isnan(out[0]));  // thread 0 ran ahead of thread 63's write
}

BOOST_AUTO_TEST_CASE(a_barrier_some_threads_skip_is_a_fault) {
  try {
    emu::launch(divergent_barrier_kernel, "divergent", 2, 64)();
    BOOST_FAIL("no fault");
  } catch (const emu::KernelFault& e) {
    BOOST_TEST(std::string(e.what()).find("kernel divergent, block (0,0,0)") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("32 of 64 threads at __syncthreads") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_misaligned_ldmatrix_row_is_a_fault) {
  emu::launch(ldmatrix_kernel, "ldmatrix", 1, 32, 4096)(0);
  BOOST_CHECK_EXCEPTION(emu::launch(ldmatrix_kernel, "ldmatrix", 1, 32, 4096)(8), emu::KernelFault,
                        [](const emu::KernelFault& e) {
                          return std::string(e.what()).find("not 16-byte aligned") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE(mma_and_ldmatrix_follow_the_ptx_fragment_layouts) {
  // Small integers: exact in bf16, their products' sums exact in fp32.
  auto a_at = [](int r, int k) { return float((r * 16 + k) % 13 - 6); };
  auto b_at = [](int k, int n) { return float((k * 16 + n) % 7 - 3); };
  auto bits = [](float x) { return uint32_t(__float2bfloat16_rn(x).bits); };
  auto pair = [&](float lo, float hi) { return bits(lo) | bits(hi) << 16; };
  std::vector<__nv_bfloat16> tiles(48 * kLd, __float2bfloat16_rn(0.0f));
  for (int x = 0; x < 16; ++x)
    for (int y = 0; y < 16; ++y) {
      tiles[size_t(x * kLd + y)] = __float2bfloat16_rn(a_at(x, y));
      tiles[size_t((16 + x) * kLd + y)] = __float2bfloat16_rn(b_at(x, y));
      tiles[size_t((32 + y) * kLd + x)] = __float2bfloat16_rn(b_at(x, y));
    }
  std::vector<uint32_t> regs(32 * 12);
  std::vector<float> d(32 * 8);
  emu::launch(fragments_kernel, "fragments", 1, 32, 48 * kLd * 2)(tiles.data(), regs.data(), d.data());
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const uint32_t* r = &regs[size_t(12 * lane)];
    BOOST_TEST(r[0] == pair(a_at(g, 2 * t), a_at(g, 2 * t + 1)));
    BOOST_TEST(r[1] == pair(a_at(g + 8, 2 * t), a_at(g + 8, 2 * t + 1)));
    BOOST_TEST(r[2] == pair(a_at(g, 2 * t + 8), a_at(g, 2 * t + 9)));
    BOOST_TEST(r[3] == pair(a_at(g + 8, 2 * t + 8), a_at(g + 8, 2 * t + 9)));
    for (int n = 0; n < 2; ++n) {  // the n-tiles 0..7 and 8..15: b[2n], b[2n + 1]
      BOOST_TEST(r[4 + 2 * n] == pair(b_at(2 * t, 8 * n + g), b_at(2 * t + 1, 8 * n + g)));
      BOOST_TEST(r[5 + 2 * n] == pair(b_at(2 * t + 8, 8 * n + g), b_at(2 * t + 9, 8 * n + g)));
    }
    for (int e = 0; e < 4; ++e) BOOST_TEST(r[8 + e] == r[4 + e]);  // B transposed = Bᵀ plain
    for (int n = 0; n < 2; ++n)
      for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 8 * n + 2 * t + e % 2;
        float want = 0;
        for (int k = 0; k < 16; ++k) want += a_at(row, k) * b_at(k, col);
        BOOST_TEST(d[size_t(8 * lane + 4 * n + e)] == want, "lane " << lane << " n " << n << " e " << e);
      }
  }
}

// A copy lands at its wait in order, at its issue in reverse: the two
// hazards a pipelined kernel can have (read too early, overwrite too early).
BOOST_AUTO_TEST_CASE(cp_async_copies_land_by_their_wait) {
  std::vector<float> src(32 * 4), before(32), after(32);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i + 1);
  for (const emu::Schedule order : {emu::Schedule::ThreadOrder, emu::Schedule::Reverse}) {
    emu::set_schedule(order);
    emu::launch(async_copy_kernel, "async_copy", 1, 32, 32 * 16)(src.data(), before.data(), after.data());
    for (int i = 0; i < 32; ++i) {
      const float want = i % 2 == 0 ? src[size_t(4 * i)] : 0.0f;
      BOOST_TEST(after[size_t(i)] == want);
      if (order == emu::Schedule::ThreadOrder)
        BOOST_TEST(std::isnan(before[size_t(i)]));
      else
        BOOST_TEST(before[size_t(i)] == want);
    }
  }
  emu::set_schedule(emu::Schedule::ThreadOrder);
  BOOST_CHECK_EXCEPTION(emu::launch(async_copy_kernel, "async_copy", 1, 32, 32 * 16)(src.data() + 1, before.data(),
                                                                                     after.data()),
                        emu::KernelFault, [](const emu::KernelFault& e) {
                          return std::string(e.what()).find("cp.async: a source not 16-byte aligned") !=
                                 std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE(shared_memory_past_48_kib_needs_the_kernels_attribute) {
  int ran = 0;
  emu::launch(shared_kernel, "shared", 1, 32, 64 << 10)(&ran);
  BOOST_TEST(ran == 0);
  const cudaError_t e = cudaGetLastError();
  BOOST_TEST(e == cudaErrorInvalidValue);
  BOOST_TEST(std::string(cudaGetErrorString(e)).find("65536 bytes of dynamic shared memory") != std::string::npos);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // read once, then cleared
  BOOST_TEST(cudaFuncSetAttribute(shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10) ==
             cudaErrorInvalidValue);  // past the 99 KiB of compute capability 8.6
  BOOST_TEST(cudaFuncSetAttribute(shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10) == cudaSuccess);
  emu::launch(shared_kernel, "shared", 1, 32, 64 << 10)(&ran);
  BOOST_TEST(ran == 1);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
}

BOOST_AUTO_TEST_SUITE_END()
