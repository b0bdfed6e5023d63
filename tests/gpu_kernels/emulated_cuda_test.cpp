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
#include <mma.h>  // the emulator's

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cuda_emulator.h"
#include "dsl/frontend.h"
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
  auto program_of = [](const char* precision) {
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
  };
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
  } const paths[] = {{false, AttentionPath::Reference, 0, false, "fp32, batched attention"},
                     {true, AttentionPath::TensorCore, 0, true, "bf16, tensor-core attention"},
                     {true, AttentionPath::TensorCore, 32, false, "bf16, tensor cores in causal blocks of 32"},
                     {true, AttentionPath::Flash, 0, false, "bf16, flash attention"}};
  for (const Path& p : paths)
    for (const auto& [schedule, name] : kSchedules) {
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
void wmma_kernel(int offset_bytes) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(c, reinterpret_cast<float*>(emu::dynamic_shared() + offset_bytes), 16, wmma::mem_row_major);
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

BOOST_AUTO_TEST_CASE(a_misaligned_wmma_pointer_is_a_fault) {
  emu::launch(wmma_kernel, "wmma", 1, 32, 4096)(0);
  BOOST_CHECK_EXCEPTION(
      emu::launch(wmma_kernel, "wmma", 1, 32, 4096)(16), emu::KernelFault,
      [](const emu::KernelFault& e) { return std::string(e.what()).find("not 32-byte aligned") != std::string::npos; });
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
