// bench_gpu: what bench/gpu/run.sh runs on a GPU machine, one subcommand
// per check, each printing one JSON line (exit 1 when a check fails):
//   ops       every op of nn/backend.h, CUDA backend vs CPU backend
//             (gpu/backend_compare.h; fp32: 1e-5, bf16: 1e-2 / GEMMs 2e-2;
//             --attention picks the path, tensorcore and flash: attention 5e-2)
//   selfcheck the start-up self-check (fast kernels vs reference path), timed
//             (--attention flash: with the flash kernels' check)
//   model     a transformer section's loss and every gradient after one
//             forward/backward, CUDA backend vs CPU backend, same init
//             (--attention picks the path)
//   step      training steps (forward, loss, backward, AdamW) of a
//             transformer section on the CUDA backend: tokens/s, model FLOP/s
//             (--profile: each op's device time per step, from timing events
//             around every op — CudaBackendOptions::profile_ops; the step
//             rate of a profiled run is not the benchmark's)
//   gemm      cuBLASLt bf16 GEMM rate (fp32 accumulate and output) at
//             several sizes: the peak MFU is measured against
//   copies    the backend's copies between the device and host memory
//             that is pageable or pinned (cuda_pin_host, as the runtime
//             pins its hand-off and staging memory): GB/s per size
//   long      attention over one sequence too long for the batched paths'
//             [H, L, L] buffers within the backend's budget (an eighth of
//             the device's memory: the shortest multiple of 1,024 tokens
//             past it, 16 heads of 128): Auto (the tiled kernel then) and the
//             flash kernels vs the tensor-core batched path, same inputs
//             (5e-2), all three timed
//   nccl      every collective over NCCL groups of all the GPUs here
//             (gpu/collective_check.h), made both ways the runtime makes
//             them: ncclCommInitAll, and the unique id + non-blocking
//             ncclCommInitRankConfig of a group spanning processes. With one
//             GPU the groups have one rank (NCCL allows no two ranks on a GPU)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.h"
#include "dsl/frontend.h"
#include "graph/counts.h"
#include "gpu/backend_compare.h"
#include "gpu/collective_check.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/device_probe.h"
#if MAESTRO_HAVE_NCCL
#include "gpu/cuda/nccl_communicator.h"
#endif
#include "gpu/cuda/self_check.h"
#include "gpu/device_query.h"
#include "nn/section_model.h"

using namespace maestro;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct ModelArgs {
  int64_t layers = 2, hidden = 128, heads = 4, ffn = 384, vocab = 512, samples = 4, tokens = 64;
};

Program load_transformer(const ModelArgs& a, bool fp32) {
  const std::string text = fmt::format(
      "section llm {{ model = transformer(layers: {}, hidden: {}, heads: {}, ffn: {}, vocab: {}, max_seq: {}); "
      "consumes = [text]; loss = cross_entropy; }}\n"
      "data {{ source = synthetic(seed: 1); mix {{ text = 1.0; }} text_tokens = {}; }}\n"
      "train {{ global_batch = {}; steps = 100; optimizer = adamw(lr: 1e-4); precision = {}; }}\n",
      a.layers, a.hidden, a.heads, a.ffn, a.vocab, a.tokens, a.tokens, a.samples, fp32 ? "fp32" : "bf16");
  Diagnostics diags;
  std::optional<Program> p = load_program_text(text, "bench.sect", diags);
  if (!p) {
    diags.render(std::cerr);
    std::exit(2);
  }
  return *p;
}

std::vector<std::vector<int32_t>> token_ids(const ModelArgs& a) {
  std::vector<std::vector<int32_t>> ids(size_t(a.samples), std::vector<int32_t>(size_t(a.tokens)));
  for (int64_t s = 0; s < a.samples; ++s)
    for (int64_t t = 0; t < a.tokens; ++t) ids[size_t(s)][size_t(t)] = int32_t((s * 7919 + t * 104729) % a.vocab);
  return ids;
}
std::vector<SampleInput> inputs_of(const std::vector<std::vector<int32_t>>& ids) {
  std::vector<SampleInput> in(ids.size());
  for (size_t s = 0; s < ids.size(); ++s) in[s].tokens = ids[s];
  return in;
}

int run_ops(bool fp32, AttentionPath attention, int device) {
  CudaBackendOptions o;
  o.device = device;
  o.bf16_gemm = !fp32;
  o.attention = attention;
  o.min_segment_bytes = size_t(64) << 20;
  const std::unique_ptr<Backend> gpu = make_cuda_backend(o), cpu = make_cpu_backend(0);
  CompareOptions c;
  c.tolerance = fp32 ? 1e-5 : 1e-2;
  c.gemm_tolerance = fp32 ? 1e-5 : 2e-2;
  if (attention == AttentionPath::TensorCore || attention == AttentionPath::Flash)
    c.attention_tolerance = kSelfCheckTensorCoreAttentionTolerance;
  const std::vector<OpCheck> r = compare_backends(*gpu, *cpu, c);
  nlohmann::ordered_json j;
  j["check"] = "ops";
  j["precision"] = fp32 ? "fp32" : "bf16";
  j["attention"] = int(attention);
  bool ok = true;
  for (const OpCheck& x : r) {
    j["ops"][x.op] = {{"rel_err", x.rel_err}, {"tolerance", x.tolerance}, {"ok", x.ok()}};
    ok = ok && x.ok();
  }
  j["ok"] = ok;
  fmt::print("{}\n", j.dump());
  return ok ? 0 : 1;
}

int run_selfcheck(AttentionPath attention, int device) {
  const auto t = Clock::now();
  nlohmann::ordered_json j;
  j["check"] = "selfcheck";
  try {
    const std::vector<OpCheck> r = gpu_self_check(device, true, true, attention);
    j["seconds"] = seconds_since(t);
    for (const OpCheck& x : r) j["ops"][x.op] = x.rel_err;
    j["ok"] = true;
  } catch (const GpuSelfCheckFailed& e) {
    j["ok"] = false;
    j["error"] = e.what();
  }
  fmt::print("{}\n", j.dump());
  return j["ok"] ? 0 : 1;
}

// Loss and all gradients of one forward/backward, CUDA vs CPU, same seed.
int run_model(const ModelArgs& a, bool fp32, AttentionPath attention, int device) {
  const Program program = load_transformer(a, fp32);
  const Section& section = program.sections[0];
  CudaBackendOptions o;
  o.device = device;
  o.bf16_gemm = !fp32;
  o.attention = attention;
  const std::unique_ptr<Backend> gpu = make_cuda_backend(o), cpu = make_cpu_backend(0);
  const auto ids = token_ids(a);
  const std::vector<SampleInput> in = inputs_of(ids);
  const int64_t n_global = a.samples * (a.tokens - 1);
  double loss[2];
  std::vector<float> grads[2];
  Backend* backends[2] = {gpu.get(), cpu.get()};
  for (int i = 0; i < 2; ++i) {
    SectionModel model(section, *backends[i], 1);
    model.zero_grads();
    ForwardOutput out = model.forward(in);
    loss[i] = model.loss(*out.context, {}, n_global);
    model.backward(*out.context, {});
    grads[i].resize(model.grad_count());
    backends[i]->copy_to_host(grads[i].data(), model.grads(), grads[i].size() * sizeof(float));
  }
  double num = 0, den = 1e-30;
  bool finite = true;
  for (size_t k = 0; k < grads[0].size(); ++k) {
    finite = finite && std::isfinite(grads[0][k]);
    num = std::max(num, double(std::abs(grads[0][k] - grads[1][k])));
    den = std::max(den, double(std::abs(grads[1][k])));
  }
  const double tol = fp32 ? 1e-4 : 5e-2, loss_err = std::abs(loss[0] - loss[1]) / std::abs(loss[1]);
  nlohmann::ordered_json j;
  j["check"] = "model";
  j["precision"] = fp32 ? "fp32" : "bf16";
  j["attention"] = attention_path_name(attention);
  j["loss_cuda"] = loss[0];
  j["loss_cpu"] = loss[1];
  j["loss_rel_err"] = loss_err;
  j["grad_rel_err"] = num / den;
  j["tolerance"] = tol;
  j["ok"] = finite && loss_err <= tol && num / den <= tol;
  fmt::print("{}\n", j.dump());
  return j["ok"] ? 0 : 1;
}

int run_step(const ModelArgs& a, bool fp32, AttentionPath attention, int64_t causal_block, bool bf16_copies,
             bool profile, int device, int steps, int warmup) {
  const Program program = load_transformer(a, fp32);
  const Section& section = program.sections[0];
  CudaBackendOptions o;
  o.device = device;
  o.bf16_gemm = !fp32;
  o.attention = attention;
  o.causal_block = causal_block;
  o.bf16_operand_copies = bf16_copies;
  o.profile_ops = profile;
  const std::unique_ptr<Backend> gpu = make_cuda_backend(o);
  SectionModel model(section, *gpu, 1);
  const auto ids = token_ids(a);
  const std::vector<SampleInput> in = inputs_of(ids);
  const int64_t n_global = a.samples * (a.tokens - 1);
  std::vector<double> step_s, losses;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) (void)cuda_backend_op_times(*gpu);  // the profile of the timed steps only
    const auto t = Clock::now();
    model.zero_grads();
    ForwardOutput out = model.forward(in);
    const double loss = model.loss(*out.context, {}, n_global);  // reads the loss back: the step's sync point
    model.backward(*out.context, {});
    model.adamw_step(program.train.optimizer, 1e-4);
    (void)model.grad_sq_norm();  // waits for the step's work
    if (i >= warmup) {
      step_s.push_back(seconds_since(t));
      losses.push_back(loss);
    }
  }
  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double flops = section_flops(section, std::vector<int64_t>(size_t(a.samples), a.tokens)).total();
  nlohmann::ordered_json j;
  j["check"] = "step";
  j["precision"] = fp32 ? "fp32" : "bf16";
  j["attention"] = int(attention);
  j["causal_block"] = causal_block;
  j["bf16_copies"] = gpu->wants_bf16_operands();
  j["params"] = model.parameter_count();
  j["step_s"] = step_s;
  j["median_s"] = median;
  j["tokens_per_s"] = double(a.samples * a.tokens) / median;
  j["flops_per_step"] = flops;
  j["tflops"] = flops / median / 1e12;
  j["losses"] = losses;
  if (profile) {  // per step: each op's calls and device time, the most first
    double total = 0;
    for (const OpTime& t : cuda_backend_op_times(*gpu)) {
      j["ops"].push_back({{"op", t.op}, {"calls", double(t.calls) / steps}, {"ms", t.ms / steps}});
      total += t.ms / steps;
    }
    j["ops_ms"] = total;
  }
  fmt::print("{}\n", j.dump());
  return 0;
}

// cuBLASLt bf16 GEMM rates (gpu/cuda/device_probe.h) and their best.
int run_gemm(int device) {
  nlohmann::ordered_json j;
  j["check"] = "gemm";
  double best = 0;
  for (const GemmRate& r : measure_gemm_rates(device, true)) {
    j["sizes"].push_back({{"M", r.M}, {"N", r.N}, {"K", r.K}, {"tflops", r.flops / 1e12}});
    best = std::max(best, r.flops / 1e12);
  }
  j["peak_tflops"] = best;
  j["device"] = device_name(device);
  fmt::print("{}\n", j.dump());
  return 0;
}

// Backend::copy_to_host / copy_from_host of 1, 16 and 64 MiB into and out
// of pageable memory and the same memory pinned; best of 5 each. (Uploads
// up to 64 MiB go through the backend's pinned ring either way.) And
// copy_from_host_held from the pinned memory, which the backend copies by
// DMA straight from it, as it uploads the runner's hand-offs. ok: the
// pinning took, and a held upload of a pattern read back gives its bytes.
int run_copies(int device) {
  CudaBackendOptions o;
  o.device = device;
  const std::unique_ptr<Backend> gpu = make_cuda_backend(o);
  nlohmann::ordered_json j;
  j["check"] = "copies";
  bool ok = true;
  for (const size_t bytes : {size_t(1) << 20, size_t(16) << 20, size_t(64) << 20}) {
    std::vector<char> pageable(bytes, 1), pinned(bytes, 1);
    const bool pin = cuda_pin_host(pinned.data(), bytes);
    ok = ok && pin;
    float* d = gpu->allocate(bytes / sizeof(float));
    auto best_gbs = [&](char* host, bool down, bool held = false) {
      double best = 0;
      for (int i = 0; i < 6; ++i) {
        const auto t = Clock::now();
        if (down) gpu->copy_to_host(host, d, bytes);
        else {
          if (held) gpu->copy_from_host_held(d, host, bytes);
          else gpu->copy_from_host(d, host, bytes);
          gpu->copy_to_host(host, d, 0);  // waits for the upload (copy_to_host is the sync point)
        }
        if (i > 0) best = std::max(best, double(bytes) / seconds_since(t) / 1e9);
      }
      return best;
    };
    j["sizes"].push_back({{"bytes", bytes},
                          {"d2h_pageable_gbs", best_gbs(pageable.data(), true)},
                          {"d2h_pinned_gbs", best_gbs(pinned.data(), true)},
                          {"h2d_pageable_gbs", best_gbs(pageable.data(), false)},
                          {"h2d_pinned_gbs", best_gbs(pinned.data(), false)},
                          {"h2d_held_pinned_gbs", best_gbs(pinned.data(), false, true)},
                          {"pinned", pin}});
    // The held path's bytes: a pattern up, back down into pageable memory;
    // the fence taken after the upload (as the runner takes it) has passed.
    for (size_t i = 0; i < bytes; ++i) pinned[i] = char(i * 7 + 3);
    gpu->copy_from_host_held(d, pinned.data(), bytes);
    const uint64_t fence = gpu->fence();
    gpu->copy_to_host(pageable.data(), d, bytes);
    const bool same = std::equal(pinned.begin(), pinned.end(), pageable.begin()) && gpu->passed(fence);
    j["sizes"].back()["held_bytes_match"] = same;
    ok = ok && same;
    gpu->release(d);
    if (pin) cuda_unpin_host(pinned.data());
  }
  // A column slice held from pinned memory (copy_rows_from_host_held: one
  // tp rank's teacher logits, 2,048 rows of half a 32,000 vocabulary) as
  // one strided DMA, against a held copy per row (the base class's loop,
  // what the engine did before); best of 5 each, and the slice's bytes.
  {
    const size_t rows = 2048, pitch = 32000 * sizeof(float), width = 16000 * sizeof(float), first = 8000;
    std::vector<char> src(rows * pitch), back(rows * width);
    for (size_t i = 0; i < src.size(); ++i) src[i] = char(i * 13 + 5);
    const bool pin = cuda_pin_host(src.data(), src.size());
    float* d = gpu->allocate(rows * width / sizeof(float));
    auto best_gbs = [&](bool strided) {
      double best = 0;
      for (int i = 0; i < 6; ++i) {
        const auto t = Clock::now();
        if (strided) gpu->copy_rows_from_host_held(d, width, src.data() + first * sizeof(float), pitch, width, rows);
        else gpu->Backend::copy_rows_from_host_held(d, width, src.data() + first * sizeof(float), pitch, width, rows);
        gpu->copy_to_host(back.data(), d, 0);
        if (i > 0) best = std::max(best, double(rows * width) / seconds_since(t) / 1e9);
      }
      return best;
    };
    const double per_row = best_gbs(false), strided = best_gbs(true);
    std::fill(back.begin(), back.end(), char(0));
    gpu->copy_rows_from_host_held(d, width, src.data() + first * sizeof(float), pitch, width, rows);
    gpu->copy_to_host(back.data(), d, back.size());
    bool same = true;
    for (size_t r = 0; r < rows && same; ++r)
      same = std::equal(back.begin() + std::ptrdiff_t(r * width), back.begin() + std::ptrdiff_t((r + 1) * width),
                        src.begin() + std::ptrdiff_t(r * pitch + first * sizeof(float)));
    j["rows"] = {{"rows", rows},     {"row_bytes", width},  {"pitch", pitch},        {"pinned", pin},
                 {"per_row_gbs", per_row}, {"strided_gbs", strided}, {"bytes_match", same}};
    ok = ok && pin && same;
    gpu->release(d);
    if (pin) cuda_unpin_host(src.data());
  }
  // A 64 MiB hand-off from one backend to another of this GPU, as runners
  // make it (docs/gpu.md, "Hand-offs"): kept in GPU memory (the producer
  // copies into a block of its own and marks it; the consumer's stream
  // waits for the mark and copies device to device) against through
  // pinned host memory (download, then a held upload); best of 5 each, to
  // the consumer's sync, and the kept way's bytes.
  {
    const size_t bytes = size_t(64) << 20, n = bytes / sizeof(float);
    const std::unique_ptr<Backend> consumer = make_cuda_backend(o);
    std::vector<float> pattern(n), back(n);
    for (size_t i = 0; i < n; ++i) pattern[i] = float(i % 1021) * 0.5f;
    std::vector<char> staging(bytes);
    const bool pin = cuda_pin_host(staging.data(), bytes);
    float* out = gpu->allocate(n);  // the producer's output
    gpu->copy_from_host(out, pattern.data(), bytes);
    float* in = consumer->allocate(n);  // the consumer's activations
    auto best_gbs = [&](bool kept) {
      double best = 0;
      for (int i = 0; i < 6; ++i) {
        const auto t = Clock::now();
        if (kept) {
          float* block = gpu->allocate(n);
          gpu->copy(block, out, n);
          consumer->wait_for(gpu->ready_marker());
          consumer->copy_from_host_held(in, block, bytes);
          consumer->copy_to_host(back.data(), in, 0);
          gpu->release(block);
        } else {
          gpu->copy_to_host(staging.data(), out, bytes);
          consumer->copy_from_host_held(in, staging.data(), bytes);
          consumer->copy_to_host(back.data(), in, 0);
        }
        if (i > 0) best = std::max(best, double(bytes) / seconds_since(t) / 1e9);
      }
      return best;
    };
    const double host_way = best_gbs(false);
    consumer->zero(in, n);
    const double kept_way = best_gbs(true);
    consumer->copy_to_host(back.data(), in, bytes);
    const bool same = back == pattern;
    j["handoff"] = {{"bytes", bytes}, {"kept_gbs", kept_way}, {"host_gbs", host_way}, {"pinned", pin},
                    {"bytes_match", same}};
    ok = ok && same;
    consumer->release(in);
    gpu->release(out);
    if (pin) cuda_unpin_host(staging.data());
  }
  j["device"] = device_name(device);
  j["ok"] = ok;
  fmt::print("{}\n", j.dump());
  return ok ? 0 : 1;
}

// check_collectives over an NCCL group of every GPU here, each rank's
// collectives ordered after its own CUDA backend's stream (as the runtime
// orders them), for both ways of making a group.
int run_nccl() {
#if !MAESTRO_HAVE_NCCL
  throw std::runtime_error("this build has no NCCL (nccl.h and libnccl were not found in the CUDA prefix)");
#else
  const std::optional<int> count = cuda_device_count();
  if (!count || *count < 1) throw std::runtime_error("no CUDA device");
  std::vector<int> devices(static_cast<size_t>(*count));
  for (int d = 0; d < *count; ++d) devices[size_t(d)] = d;
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  for (int d : devices) {
    CudaBackendOptions o;
    o.device = d;
    o.min_segment_bytes = size_t(64) << 20;
    owned.push_back(make_cuda_backend(o));
    backends.push_back(owned.back().get());
  }
  nlohmann::ordered_json j;
  j["check"] = "nccl";
  j["ranks"] = devices.size();
  bool ok = true;
  auto check = [&](const char* how, const std::vector<std::shared_ptr<Communicator>>& group) {
    for (size_t r = 0; r < group.size(); ++r)
      if (!order_nccl_after(*group[r], cuda_backend_stream(*backends[r])))
        throw std::runtime_error(fmt::format("{}: rank {} is not an NCCL rank", how, r));
    const auto t = Clock::now();
    size_t passed = 0;
    for (const CollectiveCheck& c : check_collectives(group, backends)) {
      passed += c.ok();
      if (!c.ok()) j[how]["failed"].push_back({{"call", c.call}, {"wrong", c.wrong}, {"error", c.error}});
      ok = ok && c.ok();
    }
    j[how]["passed"] = passed;
    j[how]["seconds"] = seconds_since(t);
  };
  check("init_all", make_nccl_group(devices));
  // rank r on device r
  const std::vector<std::shared_ptr<Communicator>> group = make_nccl_ranks(int(devices.size()), devices, devices);
  const std::vector<uint8_t> id = make_nccl_unique_id();
  std::vector<NcclConnection> connections;
  for (const std::shared_ptr<Communicator>& rank : group) connections.push_back({rank, id, "bench_gpu nccl group"});
  connect_nccl_ranks(connections, std::chrono::seconds(60));
  check("init_rank", group);
  j["ok"] = ok;
  fmt::print("{}\n", j.dump());
  return ok ? 0 : 1;
#endif
}

// Causal attention forward + backward over one sequence of L tokens, twice
// on the same inputs: Auto with the backend's default scratch budget (past
// it, the tiled kernel: what a long context trains with), the flash kernels
// and the tensor-core batched path (the other two's reference). Relative errors of out, dq, dk, dv; median of 3 timed runs
// after one warm-up each.
int run_long_attention(int device) {
  const int64_t H = 16, D = 128, budget = device_memory_bytes(device) / 8;
  int64_t L = 1024;
  while (batched_attention_scratch_bytes(H, L, true) <= budget) L += 1024;
  const size_t n = size_t(L * H * D);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = float(int64_t(i * 2654435761u % 2001) - 1000) * 1e-3f;
  const std::vector<int32_t> cu = {0, int32_t(L)};
  nlohmann::ordered_json j;
  j["check"] = "long";
  j["tokens"] = L;
  j["heads"] = H;
  j["head_dim"] = D;
  j["batched_scratch_gb"] = double(batched_attention_scratch_bytes(H, L, true)) / 1e9;
  j["budget_gb"] = double(budget) / 1e9;
  const bool tiled = choose_attention(AttentionPath::Auto, true, D, L, H, budget) == AttentionKernel::Tiled;
  j["auto_kernel"] = tiled ? "tiled" : "batched";
  // out, dq, dk, dv of one path, and its median time
  auto run_path = [&](AttentionPath path, const char* name) {
    CudaBackendOptions o;
    o.device = device;
    o.attention = path;
    const std::unique_ptr<Backend> b = make_cuda_backend(o);
    float* q = b->allocate(n);  // [L, H*D] each; q, k, v and dout share the values
    float* k = b->allocate(n);
    float* v = b->allocate(n);
    float* dout = b->allocate(n);
    float* out = b->allocate(n);
    float* dq = b->allocate(n);
    float* dk = b->allocate(n);
    float* dv = b->allocate(n);
    float* lse = b->allocate(size_t(L * H));  // [L, H]
    for (float* p : {q, k, v, dout}) b->copy_from_host(p, host.data(), n * sizeof(float));
    std::vector<double> ms;
    for (int i = 0; i < 4; ++i) {
      const auto t = Clock::now();
      b->attention_forward(out, lse, q, k, v, cu.data(), 1, L, H, H, D, true);
      b->attention_backward(Grad::overwrite(dq), Grad::overwrite(dk), Grad::overwrite(dv), dout, out, lse, q, k, v,
                            cu.data(), 1, L, H, H, D, true);
      float sink = 0;
      b->copy_to_host(&sink, dv, sizeof(float));
      if (i > 0) ms.push_back(seconds_since(t) * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    j[name]["ms"] = ms[1];
    std::vector<std::vector<float>> r;
    for (const float* p : {out, dq, dk, dv}) {
      r.emplace_back(n);
      b->copy_to_host(r.back().data(), p, n * sizeof(float));
    }
    return r;
  };
  const auto a = run_path(AttentionPath::Auto, "auto");
  const auto c = run_path(AttentionPath::TensorCore, "tensorcore");
  // The flash kernels last, and their failure kept to their own fields: an
  // error there (a CUDA error may poison the process) leaves the other two.
  std::vector<std::vector<float>> f;
  try {
    f = run_path(AttentionPath::Flash, "flash");
  } catch (const std::exception& e) {
    j["flash_error"] = e.what();
  }
  bool ok = tiled && !f.empty();
  const char* names[] = {"out", "dq", "dk", "dv"};
  const std::pair<const char*, const std::vector<std::vector<float>>*> against_tc[] = {{"rel_err", &a},
                                                                                       {"flash_rel_err", &f}};
  for (const auto& [key, x] : against_tc)
    for (size_t t = 0; t < x->size(); ++t) {
      double diff = 0, ref = 0;
      for (size_t i = 0; i < n; ++i) {
        diff = std::max(diff, double(std::fabs((*x)[t][i] - c[t][i])));
        ref = std::max(ref, double(std::fabs(c[t][i])));
      }
      const double e = diff / ref;
      j[key][names[t]] = e;
      ok = ok && e <= kSelfCheckTensorCoreAttentionTolerance;  // NaN fails
    }
  j["ok"] = ok;
  fmt::print("{}\n", j.dump());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPU checks and benchmarks of the CUDA backend (bench/gpu/run.sh)."};
  app.require_subcommand(1);
  int device = 0;
  bool fp32 = false;
  ModelArgs m;
  int steps = 5, warmup = 2;
  app.add_option("--device", device, "CUDA device");
  app.add_flag("--fp32", fp32, "fp32 GEMMs (default: bf16 GEMMs, fp32 accumulation)");
  AttentionPath attention = AttentionPath::Auto;
  app.add_option("--attention", attention, "attention path of ops, selfcheck, model and step")
      ->transform(CLI::CheckedTransformer(std::map<std::string, AttentionPath>{{"auto", AttentionPath::Auto},
                                                                             {"fast", AttentionPath::Fast},
                                                                             {"reference", AttentionPath::Reference},
                                                                             {"tensorcore", AttentionPath::TensorCore},
                                                                             {"flash", AttentionPath::Flash}}));
  auto* ops = app.add_subcommand("ops", "every op: CUDA backend vs CPU backend");
  auto* self = app.add_subcommand("selfcheck", "the start-up self-check, timed");
  auto* model = app.add_subcommand("model", "a transformer's loss and gradients: CUDA vs CPU");
  auto* step = app.add_subcommand("step", "training step rate of a transformer section");
  auto* gemm = app.add_subcommand("gemm", "cuBLASLt bf16 GEMM rate");
  auto* copies = app.add_subcommand("copies", "device <-> host copies, pageable vs pinned");
  auto* nccl = app.add_subcommand("nccl", "every collective over NCCL groups of the GPUs here, checked exactly");
  auto* long_attention =
      app.add_subcommand("long", "attention past the batched paths' memory budget: Auto (tiled), flash, tensor cores");
  for (auto* sub : {model, step}) {
    sub->add_option("--layers", m.layers);
    sub->add_option("--hidden", m.hidden);
    sub->add_option("--heads", m.heads);
    sub->add_option("--ffn", m.ffn);
    sub->add_option("--vocab", m.vocab);
    sub->add_option("--samples", m.samples);
    sub->add_option("--tokens", m.tokens);
  }
  step->add_option("--steps", steps)->check(CLI::PositiveNumber);
  step->add_option("--warmup", warmup);
  int64_t causal_block = 0;
  step->add_option("--causal-block", causal_block,
                   "query rows per block of a causal sequence's attention GEMMs (0: launch_plan's causal_block; "
                   "the sequence's length or more: the whole square)")
      ->check(CLI::NonNegativeNumber);
  bool no_bf16_copies = false;
  step->add_flag("--no-bf16-copies", no_bf16_copies,
                 "bf16 GEMMs round every operand on each call instead of reading the engine's bf16 copies");
  bool profile = false;
  step->add_flag("--profile", profile, "each op's device time per step (timing events around every op)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*ops) return run_ops(fp32, attention, device);
    if (*self) return run_selfcheck(attention, device);
    if (*model) return run_model(m, fp32, attention, device);
    if (*step) return run_step(m, fp32, attention, causal_block, !no_bf16_copies, profile, device, steps, warmup);
    if (*gemm) return run_gemm(device);
    if (*copies) return run_copies(device);
    if (*nccl) return run_nccl();
    if (*long_attention) return run_long_attention(device);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu: error: {}\n", e.what());
    return 1;
  }
  return 2;
}
