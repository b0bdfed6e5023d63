// The whole runtime in process (actors/trainer.h): a small multimodal
// program trains for a few steps through the real actors, engine and
// planner; the same run twice gives bitwise-identical losses, dp = 2 agrees
// with dp = 1, a stage recomputed whole changes memory and not the results,
// a transformer hands on its hidden states (and trains through them), tp = 2
// runners behind a GPU's memory contract hand on what one runner does, a
// runner keeps the inputs a GPU may still be uploading until its sync,
// a failing run reports its section and exit status, and every
// actor is gone when train() returns (it returns at all: ~actor_system
// waits for every actor, so a leaked one would hang the test).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "actors/run_plan.h"
#include "actors/section_runner.h"
#include "actors/step_data.h"
#include "actors/step_inputs.h"
#include "actors/trainer.h"
#include "cpu/cpu_backend.h"
#include "data/data_error.h"
#include "dsl/frontend.h"
#include "graph/section_graph.h"
#include "plan/cost_model.h"
#include "support/checked_backend.h"
#include "support/test_programs.h"
#include "transport/collectives.h"
#include "transport/local_transport.h"
#include "transport/pinned_ranges.h"

using namespace maestro;
using maestro::test::load;

namespace {

// An image encoder -> projector -> LLM, small enough for a unit test.
std::string small_mllm(const std::string& llm_parallel, const std::string& vision_layers = "1",
                       const std::string& vision_parallel = "") {
  return R"(
section vision {
  model    = vit(layers: )" + vision_layers + R"(, hidden: 32, heads: 2, ffn: 64, patch: 4, image: 8);
  consumes = [image];
  micro_batch = 3;
  )" + vision_parallel + R"(
}
section proj { model = mlp(in: 32, out: 32); }
section llm {
  model    = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 64, max_seq: 64);
  consumes = [text];
  )" + llm_parallel + R"(
  micro_batch = 4;
  loss     = cross_entropy;
}
flow vision -> proj -> llm;
data {
  source = synthetic(seed: 5);
  mix { image_text = 0.5; text = 0.5; }
  text_tokens = uniform(min: 8, max: 24);
  images = 1;
}
train {
  global_batch = 8;
  steps = 3;
  seed = 2;
  optimizer = adamw(lr: 1e-3);
  precision = fp32;
}
)";
}

// The samples of step data `d` that carry an image (the vision section is
// section 0): at least `at_least` of them, the first `keep`.
std::vector<int32_t> image_samples(const StepData& d, size_t at_least, size_t keep = SIZE_MAX) {
  std::vector<int32_t> images;
  for (size_t i = 0; i < d.batch.samples.size(); ++i)
    if (!d.inputs[0][i].pixels.empty()) images.push_back(int32_t(i));
  BOOST_TEST_REQUIRE(images.size() >= at_least);
  images.resize(std::min(keep, images.size()));
  return images;
}

Program parse(const std::string& text) {
  Diagnostics diags;
  std::optional<Program> p = load_program_text(text, "small.sect", diags);
  BOOST_REQUIRE_MESSAGE(p.has_value(), "the test program must parse");
  return *p;
}

// The command's path: Program -> runnable program -> graph, inputs, plan -> train.
// `recompute_level`: set on every section that has `recompute = auto`.
TrainResult run(const Program& p, const std::string& schedule = "wavefront", int64_t recompute_level = 0) {
  const Program runnable = cpu_runnable(p);
  const SectionGraph graph = build_graph(runnable);
  const StepInputs inputs(graph, runnable.data, runnable.train.global_batch);
  Plan plan = plan_cpu_run(graph, 2, inputs.step(0)->batch);
  for (size_t s = 0; s < plan.sections.size(); ++s)
    if (graph.section(int(s)).recompute_auto) plan.sections[s].recompute_level = recompute_level;
  TrainOptions opt;
  opt.schedule = schedule;
  opt.threads = 2;
  return train(graph, plan, inputs, runnable.train, opt);
}

}  // namespace

BOOST_AUTO_TEST_CASE(trains_through_the_actors_deterministically) {
  const Program p = parse(small_mllm("parallel { dp = 1; }"));
  const TrainResult a = run(p), b = run(p);
  BOOST_TEST_REQUIRE(a.exit_code == 0, a.error);
  BOOST_TEST_REQUIRE(a.losses.size() == 3u);
  BOOST_TEST(a.samples == 24);
  for (double l : a.losses) BOOST_TEST(std::isfinite(l));
  BOOST_TEST(std::abs(a.losses[0] - std::log(64.0)) < 0.5);  // a fresh model is near uniform
  BOOST_TEST(a.losses == b.losses);                           // bitwise, whatever the arrival order
}

BOOST_AUTO_TEST_CASE(data_parallel_and_monolithic_agree_with_the_default) {
  const TrainResult base = run(parse(small_mllm("parallel { dp = 1; }")));
  const TrainResult dp2 = run(parse(small_mllm("parallel { dp = 2; }")));
  const TrainResult mono = run(parse(small_mllm("parallel { dp = 1; }")), "monolithic");
  BOOST_TEST_REQUIRE(dp2.exit_code == 0, dp2.error);
  BOOST_TEST_REQUIRE(mono.exit_code == 0, mono.error);
  for (size_t i = 0; i < base.losses.size(); ++i) {
    BOOST_TEST(std::abs(dp2.losses[i] - base.losses[i]) <= 1e-5 * std::abs(base.losses[i]));
    BOOST_TEST(std::abs(mono.losses[i] - base.losses[i]) <= 1e-5 * std::abs(base.losses[i]));
  }
}

// A transformer feeding a projector: its activations flow carries the
// final-normed hidden states of its text positions, and their gradient comes
// back to it. Split over tp = 2 it trains as at tp = 1; frozen, it gives the
// same first loss and then others (the gradient did reach it).
BOOST_AUTO_TEST_CASE(a_transformer_hands_on_its_hidden_states) {
  const auto text_encoder = [](const std::string& extra) {
    return R"(
section enc {
  model    = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 61, max_seq: 64, causal: false);
  consumes = [text];
  )" + extra + R"(
}
section proj { model = mlp(in: 32, out: 48); }
section llm {
  model    = transformer(layers: 1, hidden: 48, heads: 2, ffn: 64, vocab: 64, max_seq: 128);
  consumes = [text];
  loss     = cross_entropy;
}
flow enc -> proj -> llm;
data { source = synthetic(seed: 5); mix { text = 1.0; } text_tokens = uniform(min: 8, max: 24); }
train { global_batch = 8; steps = 3; seed = 2; optimizer = adamw(lr: 1e-2); precision = fp32; }
)";
  };
  const TrainResult tp1 = run(parse(text_encoder("parallel { tp = 1; dp = 1; }")));
  const TrainResult tp2 = run(parse(text_encoder("parallel { tp = 2; dp = 1; }")));
  const TrainResult frozen = run(parse(text_encoder("mode = frozen;")));
  for (const TrainResult* r : {&tp1, &tp2, &frozen}) {
    BOOST_TEST_REQUIRE(r->exit_code == 0, r->error);
    BOOST_TEST_REQUIRE(r->losses.size() == 3u);
  }
  for (size_t i = 0; i < tp1.losses.size(); ++i)
    BOOST_TEST(std::abs(tp2.losses[i] - tp1.losses[i]) <= 1e-5 * std::abs(tp1.losses[i]));
  BOOST_TEST(std::abs(frozen.losses[0] - tp1.losses[0]) <= 1e-6 * tp1.losses[0]);  // another plan: another sum order
  BOOST_TEST(std::abs(frozen.losses[2] - tp1.losses[2]) > 1e-3 * tp1.losses[2]);
}

// ZeRO-1: the same rank-order gradient sums and an elementwise AdamW, so the
// same losses bitwise; each llm replica holds half of the AdamW state.
BOOST_AUTO_TEST_CASE(a_sharded_optimizer_gives_the_unsharded_losses) {
  const std::string text = small_mllm("parallel { dp = 2; }");
  Program sharded = parse(text);
  sharded.train.optimizer.shard = true;
  const TrainResult off = run(parse(text)), on = run(sharded);
  BOOST_TEST_REQUIRE(on.exit_code == 0, on.error);
  BOOST_TEST(on.losses == off.losses);
  bool llm_sharded = false;
  for (const TrainResult::OptimizerMemory& m : on.optimizer_memory) {
    BOOST_TEST(m.sharded == (m.dp > 1), m.part << " dp " << m.dp);  // every train part the plan gives dp > 1
    if (m.sharded) BOOST_TEST(m.bytes_per_replica <= m.unsharded_bytes / 2 + sizeof(float));
    llm_sharded |= m.part == "llm" && m.sharded;
  }
  BOOST_TEST(llm_sharded);
}

// SectionPlan::recompute_level 3: the vision (in two pipeline stages: the
// second keeps the first's hidden states), the projector (its upstream
// tensors) and the LLM (its loss's gradient computed again) keep their
// inputs only and run their forwards again before the backwards — the same
// arithmetic, so the same losses, bitwise. Likewise a student whose loss
// has a kl term (the teacher's logits kept with the task).
BOOST_AUTO_TEST_CASE(a_stage_recomputed_whole_gives_the_same_losses) {
  Program p = parse(small_mllm("parallel { dp = 1; }", "2", "parallel { pp = 2; }"));
  BOOST_TEST_REQUIRE(p.sections[0].recompute_auto);  // a trained section that feeds another
  BOOST_TEST_REQUIRE(p.sections[1].recompute_auto);
  p.sections[2].recompute_auto = true;  // `recompute = auto` written on the LLM
  const TrainResult plain = run(p), replayed = run(p, "wavefront", 3);
  BOOST_TEST_REQUIRE(plain.exit_code == 0, plain.error);
  BOOST_TEST_REQUIRE(replayed.exit_code == 0, replayed.error);
  BOOST_TEST(replayed.losses == plain.losses);
  for (size_t s = 0; s < 3; ++s)
    BOOST_TEST(replayed.plan_lines.at(s).find(" recompute stage") != std::string::npos, replayed.plan_lines.at(s));
  Program kd = load("models/tiny_kd.sect");
  kd.train.steps = 2;
  for (Section& s : kd.sections) s.recompute_auto = s.mode == Mode::Train;
  const TrainResult kd_plain = run(kd), kd_replayed = run(kd, "wavefront", 3);
  BOOST_TEST_REQUIRE(kd_plain.exit_code == 0, kd_plain.error);
  BOOST_TEST_REQUIRE(kd_replayed.exit_code == 0, kd_replayed.error);
  BOOST_TEST(kd_replayed.losses == kd_plain.losses);
}

// The runner's side of it: two micro-batches of the vision in flight hold
// one micro-batch's activations (the pool reuses the first's), not two, and
// the backwards accumulate the same gradients bitwise.
BOOST_AUTO_TEST_CASE(a_stage_recomputed_whole_holds_its_input_only) {
  const Program program = cpu_runnable(parse(small_mllm("parallel { dp = 1; }", "2")));
  const SectionGraph graph = build_graph(program);
  const StepInputs inputs(graph, program.data, program.train.global_batch);
  const std::shared_ptr<const StepData> data = inputs.step(0);
  std::vector<int32_t> images = image_samples(*data, 2);  // the samples the vision runs on
  LocalTransport transport;
  auto runner = [&](bool replay) {
    // behind a GPU's memory contract: the runner hands the engine host spans only
    return std::make_unique<SectionRunner>(program, 0, 0, 1, 7, transport,
                                           std::make_unique<test_support::CheckedBackend>(1), nullptr, nullptr, false,
                                           0, replay);
  };
  auto task = [&](Task::Kind kind, int64_t mb) {
    RunTask t;
    t.task.kind = kind, t.task.micro_batch = mb, t.task.id = mb + (kind == Task::Kind::Backward ? 2 : 0);
    t.samples = {images[size_t(mb)]};
    t.data = data;
    return t;
  };
  const auto plain = runner(false), replay = runner(true);
  BOOST_TEST(replay->recomputes_stage());
  std::vector<TensorRef> outputs;
  for (int64_t mb = 0; mb < 2; ++mb) {
    const SectionRunner::Result a = plain->forward(task(Task::Kind::Forward, mb));
    const SectionRunner::Result b = replay->forward(task(Task::Kind::Forward, mb));
    BOOST_TEST_REQUIRE(a.outputs.size() == 1u);
    BOOST_TEST_REQUIRE(b.outputs.size() == 1u);
    const auto x = a.outputs[0].tensor.values(), y = b.outputs[0].tensor.values();
    BOOST_TEST(std::equal(x.begin(), x.end(), y.begin(), y.end()));
    outputs.push_back(a.outputs[0].tensor);
  }
  // The parameters and gradients weigh the same; the activations of one micro-batch less.
  BOOST_TEST(replay->memory_bytes() < plain->memory_bytes());
  for (int64_t mb = 1; mb >= 0; --mb) {
    RunTask t = task(Task::Kind::Backward, mb);
    TensorRef grad = transport.allocate(outputs[size_t(mb)].shape);
    std::span<float> g = grad.values();
    for (size_t j = 0; j < g.size(); ++j) g[j] = float(j % 7) * 0.125f - 0.375f;
    t.inputs = {{0, images[size_t(mb)], grad}};
    plain->backward(t);
    replay->backward(t);
  }
  const double a = plain->reduce_grads().grad_sq_norm, b = replay->reduce_grads().grad_sq_norm;
  BOOST_TEST(a > 0);
  BOOST_TEST(a == b);
}

// The runner keeps what the engine uploads with copy_from_host_held until
// the backend's next sync, as a GPU reading pinned memory later needs. The
// transport's memory is pinned as a GPU run pins it (entered in the
// process's table of pinned ranges as cuda_pin_host does, with no GPU to
// lock it). The LLM's forward (a loss section: it waits for nothing)
// uploads the spliced embeddings; the caller then drops its task, and the
// transport hands the embeddings' blocks to new tensors, written over; the
// backward's sync (CheckedBackend) finds every held source unchanged. The
// same for two consumers' gradients, which the runner sums.
// The results are the CPU backend's, bit for bit.
BOOST_AUTO_TEST_CASE(a_runner_holds_its_uploads_until_the_backend_syncs) {
  const Program program = cpu_runnable(parse(small_mllm("parallel { dp = 1; }")));
  const SectionGraph graph = build_graph(program);
  const StepInputs inputs(graph, program.data, program.train.global_batch);
  const std::shared_ptr<const StepData> data = inputs.step(0);
  // samples with an image: the LLM splices the projector's embeddings
  const std::vector<int32_t> images = image_samples(*data, 2, 2);
  int32_t spliced_flow = -1;
  for (size_t f = 0; f < program.flows.size(); ++f)
    if (program.flows[f].from == "proj") spliced_flow = int32_t(f);
  BOOST_TEST_REQUIRE(spliced_flow >= 0);
  const int llm = graph.find("llm");
  LocalTransport transport;
  transport.pin_host_memory({[](void* base, size_t bytes) {
                               pinned_host_ranges().add(base, bytes);
                               return true;
                             },
                             [](void* base) { pinned_host_ranges().remove(base); }});
  auto* checked = new test_support::CheckedBackend(1);
  const auto held = std::make_unique<SectionRunner>(program, llm, 0, 1, 7, transport, std::unique_ptr<Backend>(checked),
                                                    nullptr, nullptr, false);
  const auto plain = std::make_unique<SectionRunner>(program, llm, 0, 1, 7, transport, make_cpu_backend(1), nullptr,
                                                     nullptr, false);
  auto task = [&](Task::Kind kind) {
    RunTask t;
    t.task.kind = kind, t.task.micro_batch = 0, t.task.id = kind == Task::Kind::Backward ? 1 : 0;
    t.samples = images;
    t.data = data;
    if (kind == Task::Kind::Forward)
      for (const int32_t i : images) {  // a [4, 32] embedding per image (4 patches)
        TensorRef e = transport.allocate({4, 32});
        for (size_t j = 0; j < e.values().size(); ++j) e.values()[j] = float((j * 5 + size_t(i)) % 13) * 0.05f - 0.3f;
        t.inputs.push_back({spliced_flow, i, e});
      }
    return t;
  };
  for (SectionRunner* r : {held.get(), plain.get()}) r->forward(task(Task::Kind::Forward));
  {  // the tasks are gone; their blocks go to new tensors, which write over them
    std::vector<TensorRef> others;
    for (int k = 0; k < 8; ++k) {
      others.push_back(transport.allocate({4, 32}));
      for (float& x : others.back().values()) x = 9.0f;
    }
  }
  BOOST_TEST(checked->held_uploads() == 0);  // nothing synced yet
  const SectionRunner::Result a = held->backward(task(Task::Kind::Backward));  // syncs: the check
  const SectionRunner::Result b = plain->backward(task(Task::Kind::Backward));
  BOOST_TEST(checked->held_uploads() >= 2);  // both embeddings were held and checked
  BOOST_TEST_REQUIRE(a.outputs.size() == 2u);
  BOOST_TEST_REQUIRE(b.outputs.size() == 2u);
  for (size_t k = 0; k < 2; ++k) {
    const auto x = a.outputs[k].tensor.values(), y = b.outputs[k].tensor.values();
    BOOST_TEST(std::equal(x.begin(), x.end(), y.begin(), y.end()), "spliced gradient " << k);
  }
  const SectionRunner::StepScalars sa = held->reduce_grads(), sb = plain->reduce_grads();
  BOOST_TEST(sa.grad_sq_norm > 0);
  BOOST_TEST(sa.grad_sq_norm == sb.grad_sq_norm);
  BOOST_TEST_REQUIRE(sa.losses.size() == 1u);
  BOOST_TEST(sa.losses[0].loss == sb.losses[0].loss);

  // A producer that does not train takes no gradient: with the projector
  // frozen the LLM's backward copies none out (the same loss).
  Program frozen_proj = program;
  for (Section& sec : frozen_proj.sections)
    if (sec.name == "proj") sec.mode = Mode::Frozen;
  const auto frozen = std::make_unique<SectionRunner>(frozen_proj, llm, 0, 1, 7, transport, make_cpu_backend(1),
                                                      nullptr, nullptr, false);
  frozen->forward(task(Task::Kind::Forward));
  BOOST_TEST(frozen->backward(task(Task::Kind::Backward)).outputs.empty());
  BOOST_TEST(frozen->reduce_grads().losses.at(0).loss == sb.losses[0].loss);

  // Two consumers' gradients of an encoder's output: the runner uploads
  // each, held, and sums them in backend memory. The vision's backward
  // hands nothing back (raw pixels in), so nothing syncs before
  // reduce_grads: the runner must keep the task's gradients until then.
  auto* checked_vision = new test_support::CheckedBackend(1);
  const auto vision_held = std::make_unique<SectionRunner>(
      program, 0, 0, 1, 7, transport, std::unique_ptr<Backend>(checked_vision), nullptr, nullptr, false);
  const auto vision_plain =
      std::make_unique<SectionRunner>(program, 0, 0, 1, 7, transport, make_cpu_backend(1), nullptr, nullptr, false);
  auto vision_task = [&](Task::Kind kind) {
    RunTask t;
    t.task.kind = kind, t.task.micro_batch = 0, t.task.id = kind == Task::Kind::Backward ? 1 : 0;
    t.samples = {images[0]};
    t.data = data;
    for (int consumer = 0; consumer < 2 && kind == Task::Kind::Backward; ++consumer) {
      TensorRef g = transport.allocate({4, 32});
      for (size_t j = 0; j < g.values().size(); ++j)
        g.values()[j] = float((j * 3 + size_t(consumer)) % 7) * 0.1f - 0.3f;
      t.inputs.push_back({0, images[0], g});
    }
    return t;
  };
  for (SectionRunner* r : {vision_held.get(), vision_plain.get()}) {
    r->forward(vision_task(Task::Kind::Forward));
    r->backward(vision_task(Task::Kind::Backward));
  }
  {
    std::vector<TensorRef> others;
    for (int k = 0; k < 8; ++k) {
      others.push_back(transport.allocate({4, 32}));
      for (float& x : others.back().values()) x = 9.0f;
    }
  }
  const double va = vision_held->reduce_grads().grad_sq_norm, vb = vision_plain->reduce_grads().grad_sq_norm;
  BOOST_TEST(checked_vision->held_uploads() == 2);  // the two gradients
  BOOST_TEST(va > 0);
  BOOST_TEST(va == vb);
}

// Resident hand-offs (section_runner.h), as a run in one process on GPUs
// makes them, behind a GPU's memory contract: each runner's CheckedBackend
// stands for its own GPU (its blocks for that GPU's memory). The
// projector's outputs stay in its backend's memory, marked ready; the LLM
// waits for each marker and reads them from there; the LLM's gradients
// back to the projector, and the projector's back to the vision encoder
// (each output has one consumer), stay in the producing backend's memory
// too. Losses, gradient norms and the gradients handed back are the host
// path's, bit for bit; a hand-off's block goes back to its backend once
// the last reference is gone, after the runner that made it.
BOOST_AUTO_TEST_CASE(resident_handoffs_stay_in_backend_memory_and_change_no_result) {
  const Program program = cpu_runnable(parse(small_mllm("parallel { dp = 1; }")));
  const SectionGraph graph = build_graph(program);
  const StepInputs inputs(graph, program.data, program.train.global_batch);
  const std::shared_ptr<const StepData> data = inputs.step(0);
  const std::vector<int32_t> images = image_samples(*data, 2, 2);
  int32_t to_proj = -1, to_llm = -1;
  for (size_t f = 0; f < program.flows.size(); ++f)
    (program.flows[f].from == "vision" ? to_proj : to_llm) = int32_t(f);
  const int proj = graph.find("proj"), llm = graph.find("llm");
  struct Side {
    double loss = 0, llm_norm = 0, proj_norm = 0;
    std::vector<std::vector<float>> to_vision;  // the projector's input gradients
  };
  std::weak_ptr<Buffer> handed;  // a resident hand-off of the projector
  auto run = [&](bool resident) {
    LocalTransport transport;
    auto* proj_backend = new test_support::CheckedBackend(1);
    auto* llm_backend = new test_support::CheckedBackend(1);
    auto p = std::make_unique<SectionRunner>(program, proj, 0, 1, 7, transport, std::unique_ptr<Backend>(proj_backend),
                                             nullptr, nullptr, false, 0, false, resident);
    auto l = std::make_unique<SectionRunner>(program, llm, 0, 1, 7, transport, std::unique_ptr<Backend>(llm_backend),
                                             nullptr, nullptr, false, 0, false, resident);
    auto task = [&](Task::Kind kind, std::vector<FlowTensor> in) {
      RunTask t;
      t.task.kind = kind, t.task.micro_batch = 0, t.task.id = kind == Task::Kind::Backward ? 1 : 0;
      t.samples = images, t.data = data, t.inputs = std::move(in);
      return t;
    };
    std::vector<FlowTensor> patches;  // the vision encoder's outputs: [4, 32] per image
    for (const int32_t i : images) {
      TensorRef e = transport.allocate({4, 32});
      for (size_t j = 0; j < e.values().size(); ++j) e.values()[j] = float((j * 5 + size_t(i)) % 13) * 0.05f - 0.3f;
      patches.push_back({to_proj, i, e});
    }
    Side side;
    {
      const SectionRunner::Result embedded = p->forward(task(Task::Kind::Forward, patches));
      BOOST_TEST_REQUIRE(embedded.outputs.size() == 2u);
      for (const FlowTensor& o : embedded.outputs) {
        BOOST_TEST((o.tensor.device() == Device::Cuda) == resident);
        BOOST_TEST(proj_backend->holds(o.tensor.buffer->data) == resident);
        BOOST_TEST((o.tensor.buffer->ready != nullptr) == resident);
      }
      if (resident) handed = embedded.outputs[0].tensor.buffer;
      l->forward(task(Task::Kind::Forward, embedded.outputs));
      if (resident) BOOST_TEST(llm_backend->waits() == 2);  // each embedding's marker, before reading it
      const SectionRunner::Result back = l->backward(task(Task::Kind::Backward, {}));
      BOOST_TEST_REQUIRE(back.outputs.size() == 2u);
      for (const FlowTensor& o : back.outputs) {
        BOOST_TEST(o.flow == to_llm);
        BOOST_TEST(llm_backend->holds(o.tensor.buffer->data) == resident);
      }
      const SectionRunner::Result to_vision = p->backward(task(Task::Kind::Backward, back.outputs));
      if (resident) BOOST_TEST(proj_backend->waits() == 2);
      BOOST_TEST_REQUIRE(to_vision.outputs.size() == 2u);
      for (const FlowTensor& o : to_vision.outputs) {
        BOOST_TEST(proj_backend->holds(o.tensor.buffer->data) == resident);
        const auto* f = reinterpret_cast<const float*>(o.tensor.buffer->data);  // CheckedBackend memory is host memory
        side.to_vision.emplace_back(f, f + o.tensor.numel());
      }
    }
    const SectionRunner::StepScalars ls = l->reduce_grads(), ps = p->reduce_grads();
    side.loss = ls.losses.at(0).loss, side.llm_norm = ls.grad_sq_norm, side.proj_norm = ps.grad_sq_norm;
    BOOST_TEST(side.proj_norm > 0);
    p.reset();  // the projector's runner first: the LLM's runner still holds the task with its hand-offs
    return side;
  };
  const Side host = run(false), resident = run(true);
  BOOST_TEST(resident.loss == host.loss);
  BOOST_TEST(resident.llm_norm == host.llm_norm);
  BOOST_TEST(resident.proj_norm == host.proj_norm);
  BOOST_TEST((resident.to_vision == host.to_vision));
  BOOST_TEST(handed.expired());  // given back (to a backend that outlived its runner until then)
}

// Resident hand-offs stay under an eighth of the producer's GPU memory
// (section_runner.h): here 600 bytes, so of a projector's two [4, 32]
// outputs (512 bytes each) the first stays in backend memory and the
// second goes through host memory; once the first is let go, the next
// forward's first output fits again.
BOOST_AUTO_TEST_CASE(resident_handoffs_over_their_budget_go_through_host_memory) {
  const Program program = cpu_runnable(parse(small_mllm("parallel { dp = 1; }")));
  const SectionGraph graph = build_graph(program);
  const StepInputs inputs(graph, program.data, program.train.global_batch);
  const std::shared_ptr<const StepData> data = inputs.step(0);
  const std::vector<int32_t> images = image_samples(*data, 2, 2);
  LocalTransport transport;
  auto* backend = new test_support::CheckedBackend(1);
  backend->set_device_memory_bytes(8 * 600);
  SectionRunner proj(program, graph.find("proj"), 0, 1, 7, transport, std::unique_ptr<Backend>(backend), nullptr, nullptr,
                     false, 0, false, /*resident_handoffs=*/true);
  auto forward = [&](int64_t micro_batch) {
    RunTask t;
    t.task.kind = Task::Kind::Forward, t.task.micro_batch = micro_batch, t.task.id = micro_batch;
    t.samples = images, t.data = data;
    for (const int32_t i : images) {
      TensorRef e = transport.allocate({4, 32});
      for (size_t j = 0; j < e.values().size(); ++j) e.values()[j] = float((j + size_t(i)) % 5) * 0.1f;
      t.inputs.push_back({0, i, e});
    }
    return proj.forward(t);
  };
  SectionRunner::Result first = forward(0);
  BOOST_TEST_REQUIRE(first.outputs.size() == 2u);
  BOOST_TEST((first.outputs[0].tensor.device() == Device::Cuda));
  BOOST_TEST(backend->holds(first.outputs[0].tensor.buffer->data));
  BOOST_TEST((first.outputs[1].tensor.device() == Device::Host));
  first.outputs.clear();  // the consumer lets go
  const SectionRunner::Result second = forward(1);
  BOOST_TEST_REQUIRE(second.outputs.size() == 2u);
  BOOST_TEST((second.outputs[0].tensor.device() == Device::Cuda));
  BOOST_TEST((second.outputs[1].tensor.device() == Device::Host));
}

// An output with two consumers: the vision encoder feeds two projectors.
// Each projector's input gradient goes back resident like any other; the
// encoder's runner sums the two in its backend's memory, in flow order —
// one from host memory, one a resident hand-off of another backend (each
// a CheckedBackend standing for its own GPU), or both from host memory —
// and trains to the gradient norm of the sum made here, bit for bit.
BOOST_AUTO_TEST_CASE(an_output_with_two_consumers_sums_their_gradients_in_backend_memory) {
  std::string text = small_mllm("parallel { dp = 1; }");
  const std::string one = "flow vision -> proj -> llm;";
  text.replace(text.find(one), one.size(),
               "section proj2 { model = mlp(in: 32, out: 32); }\n"
               "flow vision -> proj -> llm;\nflow vision -> proj2 -> llm;");
  const Program program = cpu_runnable(parse(text));
  const SectionGraph graph = build_graph(program);
  const StepInputs inputs(graph, program.data, program.train.global_batch);
  const std::shared_ptr<const StepData> data = inputs.step(0);
  const int32_t image = image_samples(*data, 1)[0];
  int32_t to_proj = -1, to_proj2 = -1, to_llm = -1;
  for (size_t f = 0; f < program.flows.size(); ++f) {
    if (program.flows[f].from == "vision") (program.flows[f].to == "proj" ? to_proj : to_proj2) = int32_t(f);
    if (program.flows[f].from == "proj") to_llm = int32_t(f);
  }
  BOOST_TEST_REQUIRE((to_proj >= 0 && to_proj2 >= 0 && to_llm >= 0));
  LocalTransport transport;
  auto task = [&](Task::Kind kind, std::vector<FlowTensor> in) {
    RunTask t;
    t.task.kind = kind, t.task.micro_batch = 0, t.task.id = kind == Task::Kind::Backward ? 1 : 0;
    t.samples = {image}, t.data = data, t.inputs = std::move(in);
    return t;
  };
  auto host_tensor = [&](int salt) {  // [4, 32]: an image's 4 patch rows
    TensorRef x = transport.allocate({4, 32});
    for (size_t j = 0; j < x.values().size(); ++j) x.values()[j] = float((j * 5 + size_t(salt)) % 7) * 0.1f - 0.3f;
    return x;
  };
  {  // a projector hands its input gradient back resident
    auto* backend = new test_support::CheckedBackend(1);
    SectionRunner proj(program, graph.find("proj"), 0, 1, 7, transport, std::unique_ptr<Backend>(backend), nullptr,
                       nullptr, false, 0, false, /*resident_handoffs=*/true);
    BOOST_TEST_REQUIRE(proj.forward(task(Task::Kind::Forward, {{to_proj, image, host_tensor(0)}})).outputs.size() == 1u);
    const SectionRunner::Result back = proj.backward(task(Task::Kind::Backward, {{to_llm, image, host_tensor(1)}}));
    BOOST_TEST_REQUIRE(back.outputs.size() == 1u);
    BOOST_TEST(back.outputs[0].flow == to_proj);
    BOOST_TEST((back.outputs[0].tensor.device() == Device::Cuda));
    BOOST_TEST(backend->holds(back.outputs[0].tensor.buffer->data));
  }
  const TensorRef g1 = host_tensor(2), g2 = host_tensor(3);
  TensorRef both = transport.allocate({4, 32});  // g1 + g2, in flow order
  for (size_t j = 0; j < both.values().size(); ++j)
    both.values()[j] = to_proj < to_proj2 ? g1.values()[j] + g2.values()[j] : g2.values()[j] + g1.values()[j];
  auto other = std::make_shared<test_support::CheckedBackend>(1);  // another GPU, holding g2 as a resident hand-off
  TensorRef g2_resident{nullptr, {4, 32}, DType::F32};
  {
    auto* block = static_cast<float*>(other->allocate(g2.values().size(), DType::F32));
    other->copy_from_host(block, g2.values().data(), g2.bytes());
    g2_resident.buffer = std::shared_ptr<Buffer>(
        new Buffer{reinterpret_cast<std::byte*>(block), g2.bytes(), 0, 0, 0, Device::Cuda, {}, other->ready_marker()},
        [other](Buffer* b) {
          other->release(b->data);
          delete b;
        });
  }
  auto norm_after = [&](bool resident, std::vector<FlowTensor> grads, int64_t* waits = nullptr) {
    auto* backend = new test_support::CheckedBackend(1);
    SectionRunner vision(program, graph.find("vision"), 0, 1, 7, transport, std::unique_ptr<Backend>(backend), nullptr,
                         nullptr, false, 0, false, resident);
    BOOST_TEST_REQUIRE(vision.forward(task(Task::Kind::Forward, {})).outputs.size() == 2u);
    vision.backward(task(Task::Kind::Backward, std::move(grads)));
    if (waits) *waits = backend->waits();
    return vision.reduce_grads().grad_sq_norm;
  };
  const double want = norm_after(false, {{to_proj, image, both}});
  BOOST_TEST(want > 0);
  BOOST_TEST(norm_after(false, {{to_proj2, image, g2}, {to_proj, image, g1}}) == want);
  for (const bool resident : {false, true}) {
    int64_t waits = 0;
    BOOST_TEST(norm_after(resident, {{to_proj2, image, g2_resident}, {to_proj, image, g1}}, &waits) == want);
    BOOST_TEST(waits >= 1);  // g2's marker, before reading it
  }
}

// The runner's tensor-parallel paths behind a GPU's memory contract
// (CheckedBackend: host and backend memory kept apart): tp = 2 ranks, one
// thread each over an in-process group, hand on what one tp = 1 runner does
// — a text encoder's hidden states (rank 0's copy) and, backward from their
// gradients, the same gradient norm² (the ranks' shares summed); a frozen
// teacher's logits gathered whole from the ranks' columns through backend
// memory. The same with resident hand-offs (section_runner.h): what they
// hand on stays in backend memory, the teacher's logits laid side by side
// there (Backend::copy_rows), with the same values.
BOOST_AUTO_TEST_CASE(tensor_parallel_runners_hand_on_what_one_runner_does) {
  const Program program = cpu_runnable(parse(R"(
section enc {
  model    = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 61, max_seq: 64, causal: false);
  consumes = [text];
  parallel { tp = 2; dp = 1; }
}
section proj { model = mlp(in: 32, out: 48); }
section teacher {
  model    = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 61, max_seq: 64);
  mode     = frozen;
  consumes = [text];
  parallel { tp = 2; dp = 1; }
}
section llm {
  model    = transformer(layers: 1, hidden: 48, heads: 2, ffn: 64, vocab: 61, max_seq: 128);
  consumes = [text];
  loss     = cross_entropy + 0.5 * kl(temperature: 2.0);
}
flow enc -> proj -> llm;
flow teacher -> llm : logits;
data { source = synthetic(seed: 5); mix { text = 1.0; } text_tokens = uniform(min: 8, max: 24); }
train { global_batch = 4; steps = 1; seed = 2; optimizer = adamw(lr: 1e-3); precision = fp32; }
)"));
  const SectionGraph graph = build_graph(program);
  const StepInputs inputs(graph, program.data, program.train.global_batch);
  const std::shared_ptr<const StepData> data = inputs.step(0);
  LocalTransport transport;
  auto task = [&](Task::Kind kind) {
    RunTask t;
    t.task.kind = kind, t.task.micro_batch = 0, t.task.id = kind == Task::Kind::Backward ? 1 : 0;
    t.samples = {0, 1, 2, 3};
    t.data = data;
    return t;
  };
  auto close = [](const TensorRef& a, const TensorRef& b) {  // CheckedBackend memory is host memory too
    if (a.shape != b.shape) return false;
    const auto* x = reinterpret_cast<const float*>(a.buffer->data);
    const auto* y = reinterpret_cast<const float*>(b.buffer->data);
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < a.numel(); ++j) diff += std::pow(double(x[j]) - y[j], 2), norm += std::pow(double(y[j]), 2);
    return std::sqrt(diff) <= 1e-5 * std::sqrt(norm);
  };
  for (const bool resident : {false, true})
  for (const std::string name : {"enc", "teacher"}) {
    BOOST_TEST_CONTEXT(name << (resident ? ", resident hand-offs" : "")) {
      const int section = graph.find(name);
      auto runner = [&](std::shared_ptr<Communicator> tp_group) {
        return std::make_unique<SectionRunner>(program, section, 0, 1, 7, transport,
                                               std::make_unique<test_support::CheckedBackend>(1), nullptr,
                                               std::move(tp_group), false, 0, false, resident);
      };
      const auto whole = runner(nullptr);
      const auto group = make_local_group(2);
      const std::unique_ptr<SectionRunner> ranks[2] = {runner(group[0]), runner(group[1])};
      const auto on_ranks = [&](const std::function<void(int)>& f) {
        std::string errors[2];
        std::thread threads[2];
        for (int r = 0; r < 2; ++r)
          threads[r] = std::thread([&, r] {
            try {
              f(r);
            } catch (const std::exception& e) {
              errors[r] = e.what();  // the runner aborted its group: the peer fails too
            }
          });
        for (std::thread& t : threads) t.join();
        for (int r = 0; r < 2; ++r) BOOST_TEST_REQUIRE(errors[r].empty(), "rank " << r << ": " << errors[r]);
      };
      const SectionRunner::Result want = whole->forward(task(Task::Kind::Forward));
      SectionRunner::Result got[2];
      on_ranks([&](int r) { got[r] = ranks[r]->forward(task(Task::Kind::Forward)); });
      BOOST_TEST(got[1].outputs.empty());  // rank 0's stand for the replica
      BOOST_TEST_REQUIRE(got[0].outputs.size() == want.outputs.size());
      BOOST_TEST_REQUIRE(want.outputs.size() == 4u);
      const int64_t width = name == "enc" ? 32 : 61;  // hidden states; whole-vocabulary logits
      for (size_t i = 0; i < want.outputs.size(); ++i) {
        BOOST_TEST(got[0].outputs[i].flow == want.outputs[i].flow);
        BOOST_TEST(got[0].outputs[i].sample == want.outputs[i].sample);
        BOOST_TEST(want.outputs[i].tensor.shape.back() == width);
        BOOST_TEST((got[0].outputs[i].tensor.device() == (resident ? Device::Cuda : Device::Host)));
        BOOST_TEST(close(got[0].outputs[i].tensor, want.outputs[i].tensor), "output " << i);
      }
      if (name != "enc") continue;
      RunTask back = task(Task::Kind::Backward);
      for (const FlowTensor& out : want.outputs) {
        TensorRef g = transport.allocate(out.tensor.shape);
        for (size_t j = 0; j < g.values().size(); ++j) g.values()[j] = float((j * 7 + size_t(out.sample)) % 11) * 0.1f - 0.5f;
        back.inputs.push_back({out.flow, out.sample, g});
      }
      whole->backward(back);
      on_ranks([&](int r) { ranks[r]->backward(back); });
      const double w = whole->reduce_grads().grad_sq_norm;
      double shares[2] = {0, 0};
      on_ranks([&](int r) { shares[r] = ranks[r]->reduce_grads().grad_sq_norm; });
      BOOST_TEST(w > 0);
      BOOST_TEST(std::abs(shares[0] + shares[1] - w) <= 1e-5 * w);
    }
  }
}

BOOST_AUTO_TEST_CASE(errors_name_the_section_and_set_the_exit_status) {
  Program p = parse(small_mllm("parallel { dp = 1; }"));
  p.sections[1].weights = "/nonexistent/proj.safetensors";
  const TrainResult missing = run(p);
  BOOST_TEST(missing.exit_code == 1);
  BOOST_TEST(missing.error.find("proj") != std::string::npos, missing.error);
  try {
    cpu_runnable(parse(small_mllm("parallel { dp = 1; pp = 2; }")));  // one layer
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'llm'") != std::string::npos, e.what());
  }
  const TrainResult bad = run(parse(small_mllm("parallel { dp = 1; }")), "zigzag");
  BOOST_TEST(bad.exit_code == 2);
  // A teacher that keeps fewer text positions than its student (a shorter
  // max_seq) is bad input (DataError: exit status 2), found when the step's
  // inputs are made — here by the planning, as in maestro-run. (`--check`
  // finds this one from the text_tokens drawn; with files(manifest), or
  // spliced inputs, only the runtime can: so the max_seq is cut after it.)
  Program short_teacher = parse(R"(
section teacher { model = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 64, max_seq: 64); mode = frozen; consumes = [text]; }
section student { model = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 64, max_seq: 64); consumes = [text]; loss = cross_entropy + kl(temperature: 2.0); }
flow teacher -> student : logits;
data { source = synthetic(seed: 5); mix { text = 1.0; } text_tokens = 24; }
train { global_batch = 4; steps = 1; seed = 2; optimizer = adamw(lr: 1e-3); precision = fp32; }
)");
  std::get<TransformerSpec>(short_teacher.sections[0].model.spec).max_seq = 16;
  BOOST_CHECK_EXCEPTION(run(short_teacher), DataError, [](const DataError& e) {
    return std::string(e.what()).find("flow teacher -> student : logits needs the teacher's logits at each of the "
                                      "student's 24 text positions, but 'teacher' keeps 16") != std::string::npos;
  });
}

