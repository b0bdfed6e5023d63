// The per-step schedule the runtime executes (plan_adapter.h) and the sample
// geometry it rests on (sample_shape.h), on a model shaped like
// models/tiny_mllm.sect: every sample a section is active on appears in
// exactly one forward and one backward task, the dependencies admit a
// complete execution (pipeline stages handing each other their tensors),
// and the monolithic baseline runs as chains.
#include <boost/test/unit_test.hpp>

// The planner half of the runtime joins maestro_actors with the engine and the planner.
#if defined(MAESTRO_HAVE_TRAINER)

#include <map>
#include <set>

#include "actors/plan_adapter.h"
#include "actors/sample_shape.h"
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

void check_cover_and_execute(const Program& p, const StepData& d, const StepGraph& g) {
  std::set<std::tuple<int, int, int, int32_t>> seen;  // (kind, section, stage, sample)
  for (const StepTask& t : g.tasks)
    for (int32_t s : t.samples) BOOST_TEST_REQUIRE(seen.insert({int(t.kind), t.section, t.stage, s}).second);
  std::vector<int> stages(p.sections.size(), 1);
  for (const StepTask& t : g.tasks) stages[size_t(t.section)] = t.stages;
  for (size_t i = 0; i < d.batch.samples.size(); ++i) {
    const std::vector<bool> a = active_sections(p, d.batch.samples[i]);
    for (int s = 0; s < 5; ++s)
      for (int k = 0; k < 2; ++k)
        for (int stage = 0; stage < stages[size_t(s)]; ++stage)
          BOOST_TEST(seen.count({k, s, stage, int32_t(i)}) == size_t(a[s]));
  }
  // Execute in release order; a stage hands its neighbour a tensor tagged
  // with its task id, which must arrive at exactly that neighbour.
  StepExecution x(p, g, std::make_shared<StepData>(d), 0);
  std::map<int64_t, const StepTask*> task_of;
  for (const StepTask& t : g.tasks) task_of[t.id] = &t;
  int64_t handed = 0;
  for (int round = 0; round < 1000 && !x.finished(); ++round)
    for (const RunTask& t : x.release()) {
      const bool fwd = t.task.kind == TaskKind::Forward;
      const bool expects = fwd ? t.task.stage > 0 : t.task.stage < t.task.stages - 1;
      BOOST_TEST_REQUIRE(t.stage_in.empty() == !expects);
      if (expects) {
        const StepTask& from = *task_of.at(int64_t(t.stage_in.tensor.values()[0]));
        BOOST_TEST(from.micro_batch == t.task.micro_batch);
        BOOST_TEST(from.replica == t.task.replica);
        BOOST_TEST(from.stage == t.task.stage + (fwd ? -1 : 1));
        BOOST_TEST(int(from.kind) == int(t.task.kind));
        ++handed;
      }
      TaskDone done{0, t.task.id, {}, 0, 0, 0, {}};
      if (fwd ? t.task.stage < t.task.stages - 1 : t.task.stage > 0) {
        done.stage_out.tensor.buffer = std::make_shared<Buffer>();
        done.stage_out.tensor.buffer->data = {float(t.task.id)};
        done.stage_out.tensor.shape = {1};
      }
      x.complete(done);
    }
  BOOST_TEST(x.finished());
  int64_t expected = 0;
  for (const StepTask& t : g.tasks) expected += t.stage > 0;  // per stage boundary: one forward, one backward (all train)
  BOOST_TEST(handed == expected);
}

}  // namespace

BOOST_AUTO_TEST_CASE(sample_geometry) {
  const Program p = tiny_mllm_like();
  const StepData d = batch_of_ten();
  const Sample& img = d.batch.samples[0];  // image + text
  BOOST_TEST(active_sections(p, img) == (std::vector<bool>{true, true, false, false, true}));
  BOOST_TEST(output_rows(p, 0, img) == 16);  // (16 / 4)^2 patches
  BOOST_TEST(output_rows(p, 1, img) == 16);
  const SequenceShape s = sequence_shape(p, 4, img);
  BOOST_TEST(s.spliced == 16);
  BOOST_TEST(s.text == 20);
  const Sample& both = d.batch.samples[9];  // image (16) + audio (39 frames -> 19) + 83 text, max_seq 100
  BOOST_TEST(sequence_shape(p, 4, both).spliced == 35);
  BOOST_TEST(sequence_shape(p, 4, both).text == 65);  // text cut from the end
}

BOOST_AUTO_TEST_CASE(wavefront_and_monolithic_graphs_are_complete) {
  const Program p = tiny_mllm_like();
  const StepData d = batch_of_ten();
  const std::vector<SectionRun> runs = resolve_section_runs(p, 2, batch_of_ten().batch);
  BOOST_TEST(runs[4].dp == 2);
  BOOST_TEST(runs[0].micro_batch == 3);
  const StepGraph w = StepPlanner(p, runs, "wavefront").step_graph(d);
  check_cover_and_execute(p, d, w);
  const StepGraph m = StepPlanner(p, runs, "monolithic").step_graph(d);
  check_cover_and_execute(p, d, m);
  int64_t lanes = runs[0].dp, chain_heads = 0;  // one chain per lane: the largest dp (issue 10)
  for (const SectionRun& r : runs) lanes = std::max(lanes, r.dp);
  for (const StepTask& t : m.tasks) {
    // One size (the llm's) for every section, in loader order: the llm runs on every sample.
    if (t.section == 4) BOOST_TEST(t.micro_batch == t.samples.front() / 4);
    BOOST_TEST(t.samples.front() / 4 == t.samples.back() / 4);
    chain_heads += t.deps.empty();
  }
  BOOST_TEST(chain_heads == lanes);
}

BOOST_AUTO_TEST_CASE(auto_is_the_planners_choice_and_explicit_values_stay) {
  Program p = tiny_mllm_like();
  const Batch b = batch_of_ten().batch;
  const std::vector<SectionRun> runs = resolve_section_runs(p, 2, b);
  // What the planner resolves on 2 cpu slots with tp = 1, explicit values kept.
  for (Section& s : p.sections) s.parallel.tp = 1;
  RuntimeConfig config;
  config.cluster.device = "cpu";
  config.cluster.devices = 2;
  config.cluster.devices_per_node = 2;
  const SectionGraph g = build_graph(p);
  const Cluster cl = make_cluster(config);
  const Plan plan = plan_program(g, cl, RooflineCost(g, cl), b);
  for (size_t s = 0; s < runs.size(); ++s) {
    BOOST_TEST(runs[s].dp == plan.sections[s].dp);
    BOOST_TEST(runs[s].pp == plan.sections[s].pp);
    BOOST_TEST(runs[s].micro_batch == plan.sections[s].micro_batch);
  }
  BOOST_TEST(runs[0].micro_batch == 3);  // explicit
  BOOST_TEST(runs[4].dp == 2);           // explicit
  BOOST_TEST(runs[4].micro_batch == 4);  // explicit
}

BOOST_AUTO_TEST_CASE(pipeline_stages_run_as_chains_with_hand_offs) {
  Program p = tiny_mllm_like();
  p.sections[0].parallel.pp = 2;  // vit, 2 layers
  p.sections[4].parallel.pp = 2;  // the llm, dp 2
  const StepData d = batch_of_ten();
  const std::vector<SectionRun> runs = resolve_section_runs(p, 2, batch_of_ten().batch);
  BOOST_TEST(runs[0].pp == 2);
  BOOST_TEST(runs[4].pp == 2);
  BOOST_TEST(runs[1].pp == 1);
  for (const char* schedule : {"wavefront", "monolithic"}) {
    const StepGraph g = StepPlanner(p, runs, schedule).step_graph(d);
    check_cover_and_execute(p, d, g);
    for (const StepTask& t : g.tasks) BOOST_TEST(t.stages == (t.section == 0 || t.section == 4 ? 2 : 1));
  }
}

BOOST_AUTO_TEST_CASE(tp_above_one_and_impossible_pp_are_clear_errors) {
  Program p = tiny_mllm_like();
  p.sections[1].parallel.tp = 2;
  try {
    resolve_section_runs(p, 2, batch_of_ten().batch);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'vision_proj': tp = 2") != std::string::npos);
  }
  p.sections[1].parallel.tp = 1;
  p.sections[4].parallel.pp = 3;  // 2 layers
  try {
    resolve_section_runs(p, 2, batch_of_ten().batch);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'llm': pp = 3: 2 layers cannot be split into 3 pipeline stages") !=
               std::string::npos);
  }
  p.sections[4].parallel.pp = 1;
  p.sections[1].parallel.pp = 2;  // an mlp
  BOOST_CHECK_THROW(resolve_section_runs(p, 2, batch_of_ten().batch), std::invalid_argument);
}

#endif  // MAESTRO_HAVE_TRAINER
