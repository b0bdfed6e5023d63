// The run's plan and the per-step schedule the runtime executes
// (run_plan.h), and a transformer's sequence (sample_shape.h), on a model shaped like
// models/tiny_mllm.sect: every sample a section is active on appears in
// exactly one forward and one backward task, the dependencies admit a
// complete execution (pipeline stages handing each other their tensors),
// and the monolithic baseline runs as chains.
#include <boost/test/unit_test.hpp>

#include <map>
#include <set>

#include "actors/processes.h"
#include "actors/run_plan.h"
#include "actors/sample_shape.h"
#include "actors/section_runner.h"
#include "actors/step_inputs.h"
#include "cpu/cpu_backend.h"
#include "gpu/nccl_layout.h"
#include "plan/cost_model.h"
#include "transport/local_transport.h"
#include "actors/step_execution.h"
#include "config/runtime_config.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "support/test_programs.h"

using namespace maestro;
using namespace maestro::test;

namespace {

Program tiny_mllm_like() {
  Program p;
  p.sections = {
      section("vision", {"vit", VitSpec{2, 64, 4, 256, 4, 16}}, {Modality::Image}, Condition::has(Modality::Image)),
      section("vision_proj", {"mlp", MlpSpec{64, 128, 128}}, {}, Condition{}),
      section("audio", {"audio_encoder", AudioEncoderSpec{2, 64, 4, 256, 16}}, {Modality::Audio}, Condition::has(Modality::Audio)),
      section("audio_proj", {"mlp", MlpSpec{64, 128, 128}}, {}, Condition{}),
      section("llm", {"transformer", TransformerSpec{2, 128, 4, 4, 384, 256, 100}}, {Modality::Text}, Condition{}),
  };
  p.sections[0].micro_batch = 3;
  p.sections[4].loss = {LossTerm{}};
  p.sections[4].micro_batch = 4;
  p.sections[4].parallel.dp = 2;
  p.flows = {{"vision", "vision_proj", FlowKind::Activations, {}},
             {"vision_proj", "llm", FlowKind::Activations, {}},
             {"audio", "audio_proj", FlowKind::Activations, {}},
             {"audio_proj", "llm", FlowKind::Activations, {}}};
  p.train.global_batch = 10;
  return p;
}

StepData batch_of_ten() {
  StepData d;
  for (int i = 0; i < 10; ++i) {
    Sample s;
    s.id = i;
    s.modalities.add(Modality::Text);
    s.text_tokens = 20 + 7 * i;
    if (i % 3 == 0) s.modalities.add(Modality::Image), s.images = 1;
    if (i % 4 == 1) s.modalities.add(Modality::Audio), s.audio_frames = 30 + i;
    d.batch.samples.push_back(s);
  }
  return d;
}

void check_cover_and_execute(const SectionGraph& graph, const Plan& plan, const StepData& d, const Schedule& g) {
  const auto bad = validate(graph, plan, g);
  BOOST_TEST(bad.empty(), (bad.empty() ? "" : bad.front()));
  std::set<std::tuple<int, int, int64_t, int32_t>> seen;  // (kind, section, stage, sample)
  for (const Task& t : g.tasks)
    for (int32_t s : g.micro_batch_of(t).samples)
      BOOST_TEST_REQUIRE(seen.insert({int(t.kind), t.section, t.stage, s}).second);
  auto stages = [&](int s) { return plan.sections[size_t(s)].pp; };
  for (size_t i = 0; i < d.batch.samples.size(); ++i) {
    for (int s = 0; s < 5; ++s)
      for (int k = 0; k < 2; ++k)
        for (int64_t stage = 0; stage < stages(s); ++stage)
          BOOST_TEST(seen.count({k, s, stage, int32_t(i)}) == size_t(graph.active(s, d.batch.samples[i].modalities)));
  }
  // Execute in release order; a stage hands its neighbour a tensor tagged
  // with its task id, which must arrive at exactly that neighbour.
  StepExecution x(graph, plan, g, std::make_shared<StepData>(d), 0);
  std::map<int64_t, const Task*> task_of;
  for (const Task& t : g.tasks) task_of[t.id] = &t;
  int64_t handed = 0;
  for (int round = 0; round < 1000 && !x.finished(); ++round)
    for (const RunTask& t : x.release()) {
      const bool fwd = t.task.kind == Task::Kind::Forward;
      const bool expects = fwd ? t.task.stage > 0 : t.task.stage < stages(t.task.section) - 1;
      BOOST_TEST_REQUIRE(t.stage_in.empty() == !expects);
      if (expects) {
        const Task& from = *task_of.at(int64_t(t.stage_in.tensor.values()[0]));
        BOOST_TEST(from.micro_batch == t.task.micro_batch);
        BOOST_TEST(from.replica == t.task.replica);
        BOOST_TEST(from.stage == t.task.stage + (fwd ? -1 : 1));
        BOOST_TEST(int(from.kind) == int(t.task.kind));
        ++handed;
      }
      TaskDone done;
      done.task = t.task.id;
      if (fwd ? t.task.stage < stages(t.task.section) - 1 : t.task.stage > 0) {
        done.stage_out.tensor = TensorRef::of({float(t.task.id)});
        done.stage_out.tensor.shape = {1};
      }
      x.complete(done);
    }
  BOOST_TEST(x.finished());
  int64_t expected = 0;
  for (const Task& t : g.tasks) expected += t.stage > 0;  // per stage boundary: one forward, one backward (all train)
  BOOST_TEST(handed == expected);
}

}  // namespace

BOOST_AUTO_TEST_CASE(sample_geometry) {
  const Program p = tiny_mllm_like();
  const SectionGraph g = build_graph(p);
  const StepData d = batch_of_ten();
  const Sample& img = d.batch.samples[0];  // image + text
  const SequenceShape s = sequence_shape(g, 4, img);
  BOOST_TEST(s.spliced == 16);  // (16 / 4)^2 patches through the projector
  BOOST_TEST(s.text == 20);
  const Sample& both = d.batch.samples[9];  // image (16) + audio (39 frames -> 19) + 83 text, max_seq 100
  BOOST_TEST(sequence_shape(g, 4, both).spliced == 35);
  BOOST_TEST(sequence_shape(g, 4, both).text == 65);  // text cut from the end
  BOOST_TEST(sequence_shape(g, 0, img).text == 0);     // not a transformer
  Program wide = p;  // spliced embeddings alone past max_seq: a clear error
  std::get<TransformerSpec>(wide.sections[4].model.spec).max_seq = 20;
  BOOST_CHECK_THROW(sequence_shape(build_graph(wide), 4, both), DataError);  // bad input: exit status 2
}

// The command's path: Program -> cpu_runnable -> SectionGraph -> Plan.
struct Run {
  Program program;
  SectionGraph graph;
  Plan plan;
  explicit Run(const Program& p) : program(cpu_runnable(p)), graph(build_graph(program)) {
    plan = plan_cpu_run(graph, 2, batch_of_ten().batch);
  }
};

BOOST_AUTO_TEST_CASE(wavefront_and_monolithic_schedules_are_complete) {
  const Run run(tiny_mllm_like());
  const Plan& plan = run.plan;
  const StepData d = batch_of_ten();
  BOOST_TEST(plan.sections[4].dp == 2);
  BOOST_TEST(plan.sections[0].micro_batch == 3);
  check_cover_and_execute(run.graph, plan, d, StepSchedules(run.graph, plan, "wavefront").of(d.batch));
  const Schedule m = StepSchedules(run.graph, plan, "monolithic").of(d.batch);
  check_cover_and_execute(run.graph, plan, d, m);
  int64_t lanes = plan.sections[0].dp, chain_heads = 0;  // one chain per lane: the largest dp (issue 10)
  for (const SectionPlan& r : plan.sections) lanes = std::max(lanes, r.dp);
  for (const Task& t : m.tasks) {
    const std::vector<int32_t>& samples = m.micro_batch_of(t).samples;
    // One size (the llm's) for every section, in loader order: the llm runs on every sample.
    if (t.section == 4) BOOST_TEST(t.micro_batch == samples.front() / 4);
    BOOST_TEST(samples.front() / 4 == samples.back() / 4);
    chain_heads += t.deps.empty();
  }
  BOOST_TEST(chain_heads == lanes);
  BOOST_CHECK_THROW(StepSchedules(run.graph, plan, "zigzag"), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(auto_is_the_planners_choice_and_explicit_values_stay) {
  Program p = tiny_mllm_like();
  const Batch b = batch_of_ten().batch;
  const Run run(p);
  // What the planner resolves on 2 cpu slots with tp = 1, explicit values kept.
  for (Section& s : p.sections) s.parallel.tp = 1;
  RuntimeConfig config;
  config.cluster.device = "cpu";
  config.cluster.devices = 2;
  config.cluster.devices_per_node = 2;
  const SectionGraph g = build_graph(p);
  const Cluster cl = make_cluster(config);
  const Plan plan = plan_program(g, cl, RooflineCost(g, cl), b);
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    BOOST_TEST(run.plan.sections[s].dp == plan.sections[s].dp);
    BOOST_TEST(run.plan.sections[s].pp == plan.sections[s].pp);
    BOOST_TEST(run.plan.sections[s].micro_batch == plan.sections[s].micro_batch);
    BOOST_TEST(run.plan.sections[s].tp == 1);
    BOOST_TEST(run.plan.sections[s].first_device == 0);  // co-located on the slots
  }
  BOOST_TEST(run.plan.sections[0].micro_batch == 3);  // explicit
  BOOST_TEST(run.plan.sections[4].dp == 2);           // explicit
  BOOST_TEST(run.plan.sections[4].micro_batch == 4);  // explicit
}

// [cluster] device = "cpu": the run is the planner's own plan on that
// cluster (device groups kept), each node a process; each replica runs in
// the process of its first device's node. Any other device: plan_cpu_run,
// round-robin.
BOOST_AUTO_TEST_CASE(a_cpu_cluster_plans_the_run_and_places_replicas_by_node) {
  Program p = tiny_mllm_like();
  for (Section& s : p.sections) s.parallel.tp = 1;
  const SectionGraph g = build_graph(p);
  const Batch b = batch_of_ten().batch;
  RuntimeConfig config;
  config.file = "c.toml";
  config.cluster.device = "cpu";
  config.cluster.nodes = 2;
  config.cluster.devices_per_node = 2;
  const RunPlan run = plan_run(g, config, 1, 2, b);
  BOOST_TEST_REQUIRE(run.cluster.has_value());
  BOOST_TEST(run.cluster->nodes() == 2);
  const Plan direct = plan_program(g, *run.cluster, RooflineCost(g, *run.cluster), b);
  for (size_t s = 0; s < direct.sections.size(); ++s) {
    BOOST_TEST(run.plan.sections[s].first_device == direct.sections[s].first_device);
    BOOST_TEST(run.plan.sections[s].dp == direct.sections[s].dp);
    BOOST_TEST(run.plan.sections[s].micro_batch == direct.sections[s].micro_batch);
  }
  const std::vector<std::vector<int>> placed = place_replicas(run.plan, 2, 2);
  for (size_t s = 0; s < placed.size(); ++s)
    for (size_t r = 0; r < placed[s].size(); ++r)
      BOOST_TEST(placed[s][r] == stage_first_device(run.plan.sections[s], int64_t(r), 0) / 2);
  BOOST_CHECK_THROW(plan_run(g, config, 1, 3, b), std::invalid_argument);  // 2 nodes, 3 processes
  BOOST_CHECK_NO_THROW(plan_run(g, config, 1, 1, b));                       // every node in one process

  // By hand: a section on node 1 only, one whose tp 2 replicas fill a node each.
  Plan hand;
  hand.sections = {SectionPlan{2, 2, 1, 1, 2, 1}, SectionPlan{0, 4, 2, 1, 2, 1}, SectionPlan{0, 1, 1, 1, 1, 1}};
  BOOST_TEST(place_replicas(hand, 2, 2) == (std::vector<std::vector<int>>{{1, 1}, {0, 1}, {0}}));
  BOOST_TEST(place_replicas(hand, 1, 2) == (std::vector<std::vector<int>>{{0, 0}, {0, 0}, {0}}));
  BOOST_TEST(place_replicas(hand, 2) == (std::vector<std::vector<int>>{{0, 1}, {0, 1}, {0}}));  // round-robin
  hand.sections[0].first_device = 4;  // node 2 of a 2-process run
  BOOST_CHECK_THROW(place_replicas(hand, 2, 2), std::invalid_argument);

  config.cluster.device = "auto";  // the simulator's target: this machine's slots, no cluster
  const RunPlan slots = plan_run(g, config, 2, 3, b);
  BOOST_TEST(!slots.cluster.has_value());
  BOOST_TEST(slots.plan.sections[4].first_device == 0);
}

// A run in one process on cuda: the planner's own plan on the machine's
// GPUs (sections on GPUs of their own or sharing, every rank of a group on a
// GPU of its own, which NCCL needs), explicit values kept; a section asking
// for more ranks than GPUs, or a run that does not fit their memory, is a
// clear error.
BOOST_AUTO_TEST_CASE(a_cuda_run_is_planned_on_its_gpus) {
  Program p = tiny_mllm_like();  // llm: dp 2, micro_batch 4; vision: micro_batch 3
  for (Section& s : p.sections) s.parallel.tp = 1;
  const SectionGraph g = build_graph(p);
  const Batch b = batch_of_ten().batch;
  std::vector<std::string> names;
  for (const SectionNode& n : g.nodes) names.push_back(n.name);
  DeviceSpec h100 = *find_builtin_device("h100");
  h100.memory_bytes = int64_t(79.6e9);  // the GPU's own, as train_command takes it

  const Cluster eight = gpu_cluster(h100, 8);
  BOOST_TEST(eight.devices == 8);
  BOOST_TEST(eight.nodes() == 1);
  BOOST_TEST(eight.device.memory_bytes == int64_t(79.6e9));
  const Plan plan = plan_gpu_run(g, eight, 1, b);
  const Plan direct = plan_program(g, eight, RooflineCost(g, eight, true), b);  // fp32 activations, as the engine keeps them
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    const SectionPlan& sp = plan.sections[s];
    BOOST_TEST(sp.first_device == direct.sections[s].first_device);
    BOOST_TEST(sp.devices == direct.sections[s].devices);
    BOOST_TEST(sp.dp == direct.sections[s].dp);
    BOOST_TEST(sp.micro_batch == direct.sections[s].micro_batch);
    BOOST_TEST(sp.tp == 1);
    BOOST_TEST(sp.first_device >= 0);
    BOOST_TEST(sp.first_device + sp.devices <= 8);
    BOOST_TEST(sp.devices >= sp.tp * sp.dp * sp.pp);
  }
  BOOST_TEST(plan.sections[0].micro_batch == 3);  // explicit
  BOOST_TEST(plan.sections[4].dp == 2);           // explicit
  BOOST_TEST(plan.sections[4].micro_batch == 4);  // explicit
  BOOST_TEST(nccl_refusal(plan, names, 8, true) == "");  // no group with two ranks on one GPU

  // One GPU: every section on it, one replica each.
  Program p1 = p;  // the graph points at its program
  p1.sections[4].parallel.dp.reset();
  const SectionGraph g1 = build_graph(p1);
  const Plan one = plan_gpu_run(g1, gpu_cluster(h100, 1), 1, b);
  for (const SectionPlan& sp : one.sections) {
    BOOST_TEST(sp.first_device == 0);
    BOOST_TEST(sp.devices == 1);
    BOOST_TEST(sp.dp == 1);
  }

  // llm at dp 2 on one GPU: named, with where the run was planned.
  try {
    plan_gpu_run(g, gpu_cluster(h100, 1), 1, b);
    BOOST_ERROR("dp 2 on one GPU was planned");
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("section 'llm'") != std::string::npos, m);
    BOOST_TEST(m.find("2 ranks, and the run has 1 GPU (h100)") != std::string::npos, m);
  }
  // bench/gpu/run.sh's "maestro-run 1.3B" (24 layers of 2,048, 2 × 2,048
  // tokens, bf16) fits the lent H200 (143,771 MiB) with fp32 activations
  // and its hand-offs counted, as written: dp 1, micro-batch 2, GPU 0.
  {
    const Program big = cpu_runnable(load("bench/gpu/llm_1_3b.sect"));
    const SectionGraph gb = build_graph(big);
    const StepInputs inputs(gb, big.data, big.train.global_batch);
    DeviceSpec h200 = *find_builtin_device("h200");
    h200.memory_bytes = int64_t(143771) * 1024 * 1024;
    const Plan run = plan_gpu_run(gb, gpu_cluster(h200, 1), 1, inputs.step(0)->batch);
    BOOST_TEST(run.sections.at(0).dp == 1);
    BOOST_TEST(run.sections.at(0).micro_batch == 2);
    BOOST_TEST(run.sections.at(0).first_device == 0);
  }
  // GPUs too small for the weights.
  DeviceSpec tiny = h100;
  tiny.memory_bytes = 1000;
  try {
    plan_gpu_run(g1, gpu_cluster(tiny, 2), 1, b);
    BOOST_ERROR("a run larger than its GPUs was planned");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("cannot plan the run on 2 GPUs (h100)") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(pipeline_stages_run_as_chains_with_hand_offs) {
  Program p = tiny_mllm_like();
  p.sections[0].parallel.pp = 2;  // vit, 2 layers
  p.sections[4].parallel.pp = 2;  // the llm, dp 2
  const StepData d = batch_of_ten();
  const Run run(p);
  BOOST_TEST(run.plan.sections[0].pp == 2);
  BOOST_TEST(run.plan.sections[4].pp == 2);
  BOOST_TEST(run.plan.sections[1].pp == 1);
  for (const char* schedule : {"wavefront", "monolithic"})
    check_cover_and_execute(run.graph, run.plan, d, StepSchedules(run.graph, run.plan, schedule).of(d.batch));
}

BOOST_AUTO_TEST_CASE(a_tp_the_model_cannot_split_and_impossible_pp_are_clear_errors) {
  Program p = tiny_mllm_like();
  p.sections[1].parallel.tp = 2;
  BOOST_CHECK_NO_THROW(cpu_runnable(p));  // tensor parallelism runs
  p.sections[1].parallel.tp = 3;
  try {
    cpu_runnable(p);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'vision_proj': tp = 3: 'hidden'") != std::string::npos, e.what());
  }
  p.sections[1].parallel.tp = 1;
  p.sections[4].parallel.pp = 3;  // 2 layers
  try {
    cpu_runnable(p);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'llm': pp = 3: 2 layers cannot be split into 3 pipeline stages") !=
               std::string::npos);
  }
  p.sections[4].parallel.pp = 1;
  p.sections[1].parallel.pp = 2;  // an mlp
  BOOST_CHECK_THROW(cpu_runnable(p), std::invalid_argument);
}

// `recompute`: true (all layers) or N always, auto as the plan says (half
// of the layers, all, or each stage whole), false never, and a frozen section never (it keeps
// no activations for a backward); the runner's count (run_setup passes
// `recomputed_layers`) reaches the engine's section.
BOOST_AUTO_TEST_CASE(the_plans_recompute_reaches_the_engine) {
  Program p = tiny_mllm_like();
  SectionPlan off, half, all, stage;
  half.recompute_level = 1, all.recompute_level = 2, stage.recompute_level = 3;
  Section s = p.sections[4];
  s.model = ModelSpec{"t", TransformerSpec{.layers = 4, .hidden = 16, .heads = 2, .kv_heads = 2, .ffn = 32,
                                            .vocab = 64}};
  BOOST_TEST(recomputed_layers(s, all) == 0);
  s.recompute_auto = true;
  BOOST_TEST(recomputed_layers(s, off) == 0);
  BOOST_TEST(recomputed_layers(s, half) == 2);
  BOOST_TEST(recomputed_layers(s, all) == 4);
  BOOST_TEST(recompute_note(s, half) == " recompute 2/4");
  BOOST_TEST(recompute_note(s, all) == " recompute");
  // Level 3: no layer keeps its own input; the runner replays the stage.
  BOOST_TEST(recomputed_layers(s, stage) == 0);
  BOOST_TEST(recomputes_stage(s, stage));
  BOOST_TEST(!recomputes_stage(s, all));
  BOOST_TEST(recompute_note(s, stage) == " recompute stage");
  s.mode = Mode::Frozen;
  BOOST_TEST(recomputed_layers(s, all) == 0);
  BOOST_TEST(!recomputes_stage(s, stage));
  s.mode = Mode::Train, s.recompute_auto = false, s.recompute = 3;
  BOOST_TEST(recomputed_layers(s, off) == 3);
  BOOST_TEST(!recomputes_stage(s, stage));  // written: the program's, whatever the plan says
  LocalTransport transport;
  const int64_t layers = p.sections[4].model.layers();
  const SectionRunner plain(p, 4, 0, 1, 1, transport, make_cpu_backend(1), nullptr, nullptr, false, 0);
  const SectionRunner recomputing(p, 4, 0, 1, 1, transport, make_cpu_backend(1), nullptr, nullptr, false, layers);
  BOOST_TEST(plain.recomputed_layers() == 0);
  BOOST_TEST(recomputing.recomputed_layers() == layers);
}
