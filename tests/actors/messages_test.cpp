// Every message that may cross a process round-trips through CAF's
// binary_serializer / binary_deserializer, alone and inside a caf::message
// (which needs the type registered by name: add_message_types): tensors by
// value, the step's data by value (a task: only its share), null stays null; a stage hand-off that
// carries the engine's geometry (outside a run over processes, where it
// crosses as a handle), or a tensor in device memory, refuses to serialise.
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>

#include <cstring>
#include <span>

#include "actors/messages.h"
#include "actors/peer_tensors.h"
#include "actors/processes.h"
#include "transport/local_transport.h"
#include "transport/transport.h"
#include "nn/model_impl.h"  // StageGeometry

using namespace maestro;

namespace {

TensorRef tensor(std::vector<float> values, std::vector<int64_t> shape) {
  return TensorRef::of(std::move(values), std::move(shape));
}

std::vector<float> values_of(const TensorRef& t) {
  return t.empty() ? std::vector<float>{} : std::vector<float>(t.values().begin(), t.values().end());
}

struct System {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  // process: the run-over-processes protocol's types too (processes.h)
  explicit System(bool process = false) {
    if (process)
      configure_process_system(cfg);
    else
      add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  // x -> bytes -> a fresh T, and x in a caf::message -> bytes -> message -> T.
  template <class T>
  T round_trip(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    BOOST_REQUIRE_MESSAGE(!sink(x), "serialising failed");
    T out;
    caf::binary_deserializer source{*sys, buf};
    BOOST_REQUIRE_MESSAGE(!source(out), "deserialising failed");
    std::vector<char> mbuf;
    caf::binary_serializer msink{*sys, mbuf};
    caf::message m = caf::make_message(x);
    BOOST_REQUIRE_MESSAGE(!msink(m), "serialising the message failed (registered?)");
    caf::message back;
    caf::binary_deserializer msource{*sys, mbuf};
    BOOST_REQUIRE_MESSAGE(!msource(back), "deserialising the message failed");
    BOOST_REQUIRE(back.match_element<T>(0));
    T via_message = back.get_as<T>(0);
    std::vector<char> again_a, again_b;
    caf::binary_serializer a{*sys, again_a}, b{*sys, again_b};
    BOOST_REQUIRE(!a(out) && !b(via_message));
    BOOST_TEST(again_a == again_b);  // both paths give the same value
    return out;
  }
};

struct ProcessSystem : System {
  ProcessSystem() : System(true) {}
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(run_task_and_task_done, System) {
  auto data = std::make_shared<StepData>();
  data->batch.step = 3;
  Sample s;
  s.id = 7;
  s.modalities.add(Modality::Image);
  s.text_tokens = 11;
  s.images = 1;
  data->batch.samples = {s};
  data->inputs = {{SampleInputs{{1, 2, 3}, {0.5f, -0.5f}, {}}}};
  data->loss_positions = {10};
  Task task{4, 1, 1, 0, Task::Kind::Backward, 2, {1, 3}};
  RunTask rt{9, task, {0, 5}, {{2, 5, tensor({1, 2, 3, 4}, {2, 2})}}, data, {tensor({7}, {1}), nullptr}};
  const RunTask r = round_trip(rt);
  BOOST_TEST(r.step == 9);
  BOOST_TEST(r.task.id == 4);
  BOOST_TEST(r.task.section == 1);
  BOOST_TEST(r.task.replica == 1);
  BOOST_TEST(int(r.task.kind) == int(Task::Kind::Backward));
  BOOST_TEST(r.task.micro_batch == 2);
  BOOST_TEST(r.task.deps == (std::vector<int64_t>{1, 3}));
  BOOST_TEST(r.samples == (std::vector<int32_t>{0, 5}));
  BOOST_TEST_REQUIRE(r.inputs.size() == 1u);
  BOOST_TEST(r.inputs[0].flow == 2);
  BOOST_TEST(r.inputs[0].sample == 5);
  BOOST_TEST(r.inputs[0].tensor.shape == (std::vector<int64_t>{2, 2}));
  BOOST_TEST(values_of(r.inputs[0].tensor) == (std::vector<float>{1, 2, 3, 4}));
  BOOST_TEST(r.inputs[0].tensor.buffer != rt.inputs[0].tensor.buffer);  // by value: a buffer of its own
  BOOST_TEST_REQUIRE(r.data != nullptr);  // a backward task: the step and the normalisers, no inputs
  BOOST_TEST(r.data->batch.step == 3);
  BOOST_TEST(r.data->inputs.empty());
  BOOST_TEST(r.data->loss_positions == (std::vector<int64_t>{10}));
  BOOST_TEST(values_of(r.stage_in.tensor) == (std::vector<float>{7}));

  RunTask empty;  // null data, empty tensors stay so
  const RunTask e = round_trip(empty);
  BOOST_TEST(e.data == nullptr);
  BOOST_TEST(e.stage_in.tensor.empty());

  TaskDone d{9, 4, {{1, 0, tensor({0.25f}, {1, 1})}}, 10, 20, "boom", {tensor({2, 3}, {2}), nullptr}};
  const TaskDone o = round_trip(d);
  BOOST_TEST(o.step == 9);
  BOOST_TEST(o.task == 4);
  BOOST_TEST(o.outputs.size() == 1u);
  BOOST_TEST(values_of(o.outputs[0].tensor) == (std::vector<float>{0.25f}));
  BOOST_TEST(o.begin_us == 10);
  BOOST_TEST(o.duration_us == 20);
  BOOST_TEST(o.error == "boom");
  BOOST_TEST(values_of(o.stage_out.tensor) == (std::vector<float>{2, 3}));
}

// A forward task leaving its process carries its own section's inputs for
// its own samples (task_data), at their indices, and nothing of the rest of
// the step: the bytes grow with the task's samples, not with the batch.
BOOST_FIXTURE_TEST_CASE(run_task_carries_only_its_share_of_the_step, System) {
  auto data = std::make_shared<StepData>();
  data->batch.step = 5;
  data->batch.samples.resize(64);
  data->loss_positions = {0, 700};
  data->inputs.resize(2);
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 64; ++i)  // 64 samples of 4,096 pixels and 8 tokens for each of two sections
      data->inputs[size_t(s)].push_back(SampleInputs{std::vector<int32_t>(8, s * 100 + i), std::vector<float>(4096, float(i)), {}});
  RunTask rt{2, Task{6, 1, 0, 0, Task::Kind::Forward, 1, {}}, {9, 3}, {}, data, {}};
  const RunTask r = round_trip(rt);
  BOOST_TEST_REQUIRE(r.data != nullptr);
  BOOST_TEST(r.data->batch.step == 5);
  BOOST_TEST(r.data->loss_positions == (std::vector<int64_t>{0, 700}));
  BOOST_TEST_REQUIRE(r.data->inputs.size() == 2u);
  BOOST_TEST(r.data->inputs[0].empty());  // another section's
  BOOST_TEST_REQUIRE(r.data->inputs[1].size() == 64u);
  for (int i = 0; i < 64; ++i) {
    const SampleInputs& in = r.data->inputs[1][size_t(i)];
    if (i == 9 || i == 3) {
      BOOST_TEST(in.tokens == std::vector<int32_t>(8, 100 + i));
      BOOST_TEST(in.pixels == std::vector<float>(4096, float(i)));
    } else {
      BOOST_TEST((in.tokens.empty() && in.pixels.empty()));
    }
  }
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  BOOST_REQUIRE(!sink(rt));
  BOOST_TEST(buf.size() < 3 * 4096 * sizeof(float));  // two samples' pixels and little else (the whole step: 128)
  rt.task.kind = Task::Kind::Backward;
  buf.clear();
  caf::binary_serializer bsink{*sys, buf};
  BOOST_REQUIRE(!bsink(rt));
  BOOST_TEST(buf.size() < 1024u);  // a backward task reads no inputs
  BOOST_TEST(data->inputs[1][5].pixels.size() == 4096u);  // the sender's step is untouched
}

BOOST_FIXTURE_TEST_CASE(gradient_messages, System) {
  BOOST_TEST(round_trip(ReduceGrads{5}).step == 5);
  const GradsReduced g = round_trip(GradsReduced{2, 1, 3, 0.1 + 0.2, {{5, 1.25}, {9, -3e-300}}, "e"});
  BOOST_TEST(g.section == 2);
  BOOST_TEST(g.stage == 1);
  BOOST_TEST(g.replica == 3);
  BOOST_TEST(g.grad_sq_norm == 0.1 + 0.2);  // bitwise
  BOOST_TEST_REQUIRE(g.losses.size() == 2u);
  BOOST_TEST(g.losses[1].task == 9);
  BOOST_TEST(g.losses[1].loss == -3e-300);
  BOOST_TEST(g.error == "e");
  const ApplyGrads a = round_trip(ApplyGrads{6, 0.5, 1e-3});
  BOOST_TEST(a.step == 6);
  BOOST_TEST(a.scale == 0.5);
  BOOST_TEST(a.lr == 1e-3);
  const Applied ap = round_trip(Applied{1, 0, 1, "x"});
  BOOST_TEST(ap.section == 1);
  BOOST_TEST(ap.replica == 1);
  BOOST_TEST(ap.error == "x");
}

// A tensor's descriptor (transport/transport.h: a payload, not a message of
// its own) and a bf16 tensor by value.
BOOST_FIXTURE_TEST_CASE(descriptors_and_bf16_tensors, System) {
  TensorDescriptor t{17, 3, 4096, 260, DType::BF16, Device::Cuda, 4000, 512}, back_t;
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  BOOST_REQUIRE(!sink(t));
  caf::binary_deserializer source{*sys, buf};
  BOOST_REQUIRE(!source(back_t));
  BOOST_TEST((back_t == t));
  const uint16_t bits[2] = {float_to_bf16(1.5f), float_to_bf16(-2.0f)};
  const TensorRef h = TensorRef::of_bytes(std::as_bytes(std::span<const uint16_t>(bits)), {2}, DType::BF16);
  const TaskDone back = round_trip(TaskDone{1, 2, {{0, 1, h}}, 0, 0, "", {}});
  BOOST_TEST_REQUIRE(back.outputs.size() == 1u);
  const TensorRef& got = back.outputs[0].tensor;
  BOOST_TEST((got.dtype == DType::BF16));
  BOOST_TEST_REQUIRE(got.bytes() == 4u);
  uint16_t out[2];
  std::memcpy(out, got.raw().data(), 4);
  BOOST_TEST(bf16_to_float(out[1]) == -2.0f);
}

// A device tensor has no host bytes to send: an error, never garbage.
BOOST_FIXTURE_TEST_CASE(a_device_tensor_does_not_serialise_by_value, System) {
  TaskDone d;
  d.outputs = {{0, 0, tensor({1, 2}, {2})}};
  d.outputs[0].tensor.buffer->device = Device::Cuda;
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  BOOST_TEST(bool(sink(d)));
}

BOOST_FIXTURE_TEST_CASE(data_checkpoint_and_report_messages, System) {
  BOOST_TEST(round_trip(GetBatch{8}).step == 8);
  auto data = std::make_shared<StepData>();
  data->batch.step = 8;
  const BatchReady b = round_trip(BatchReady{data, "late", true});
  BOOST_TEST_REQUIRE(b.data != nullptr);
  BOOST_TEST(b.data->batch.step == 8);
  BOOST_TEST(b.error == "late");
  BOOST_TEST(b.bad_input);
  BOOST_TEST(round_trip(SaveSection{"/tmp/x"}).path == "/tmp/x");
  const Saved sv = round_trip(Saved{3, "full"});
  BOOST_TEST(sv.section == 3);
  BOOST_TEST(sv.error == "full");
  const WriteCheckpoint w = round_trip(WriteCheckpoint{4, 32, {1.5, 1.25}});
  BOOST_TEST(w.steps_done == 4);
  BOOST_TEST(w.samples == 32);
  BOOST_TEST(w.losses == (std::vector<double>{1.5, 1.25}));
  const CheckpointWritten c = round_trip(CheckpointWritten{"/ck/step-4", ""});
  BOOST_TEST(c.dir == "/ck/step-4");
  const StartTraining st = round_trip(StartTraining{2, 9});
  BOOST_TEST(st.first_step == 2);
  BOOST_TEST(st.last_step == 9);
  const StepReport r = round_trip(StepReport{3, 2.5, 8, 0.25, 0.01});
  BOOST_TEST(r.step == 3);
  BOOST_TEST(r.loss == 2.5);
  BOOST_TEST(r.samples == 8);
  BOOST_TEST(r.step_s == 0.25);
  BOOST_TEST(r.sched_s == 0.01);
  const TrainingEnded e = round_trip(TrainingEnded{5, "/ck", "bad", true, true});
  BOOST_TEST(e.steps_done == 5);
  BOOST_TEST(e.checkpoint == "/ck");
  BOOST_TEST(e.error == "bad");
  BOOST_TEST(e.interrupted);
  BOOST_TEST(e.bad_input);
  const TraceEvent t = round_trip(TraceEvent{"llm/0 worker", "forward mb 1", "task", 100, 50});
  BOOST_TEST(t.track == "llm/0 worker");
  BOOST_TEST(t.name == "forward mb 1");
  BOOST_TEST(t.category == "task");
  BOOST_TEST(t.begin_us == 100);
  BOOST_TEST(t.duration_us == 50);
  BOOST_TEST(round_trip(FlushTrace{"trace.json"}).path == "trace.json");
}

// The engine's stage geometry is opaque: outside a run over processes
// serialising a hand-off that holds one is an error, never a silent drop.
struct Geometry : StageGeometry {};
BOOST_FIXTURE_TEST_CASE(a_stage_geometry_does_not_serialise, System) {
  RunTask rt;
  rt.stage_in = {tensor({1}, {1}), std::make_shared<Geometry>()};
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  BOOST_TEST(bool(sink(rt)));
}

// In a run over processes (a PeerTensors installed as the exporter) the
// geometry crosses as a handle: a worker's TaskDone leaves it in the
// worker's table, the scheduler's process keeps only the handle and sends
// it on in the next stage's RunTask, and back at the worker it is the same
// object again. The hand-off's tensor was used by that (its one use: the
// export goes); the geometry is kept until the step's exports are
// forgotten, then refused.
BOOST_FIXTURE_TEST_CASE(a_stage_geometry_crosses_as_a_handle_back_to_its_owner, System) {
  PeerTensors worker(std::make_shared<UcxTransport>()), coordinator(std::make_shared<UcxTransport>());
  // x serialised in process `from`, deserialised in process `to` (the installed exporter says which)
  auto cross = [&](PeerTensors& from, PeerTensors& to, auto x) {
    std::vector<char> buf;
    install_peer_tensors(&from);
    caf::binary_serializer sink{*sys, buf};
    const bool saved = !sink(x);
    install_peer_tensors(&to);
    decltype(x) out;
    caf::binary_deserializer source{*sys, buf};
    const bool loaded = saved && !source(out);
    install_peer_tensors(nullptr);
    return std::make_pair(loaded, out);
  };
  const auto geometry = std::make_shared<Geometry>();
  TaskDone done;
  done.stage_out = {tensor({1, 2}, {2}), geometry};
  const auto [to_scheduler, at_scheduler] = cross(worker, coordinator, done);
  BOOST_TEST_REQUIRE(to_scheduler);
  BOOST_TEST(!at_scheduler.stage_out.geometry);
  BOOST_TEST(at_scheduler.stage_out.geometry_owner == worker.owner());
  BOOST_TEST(at_scheduler.stage_out.geometry_key != 0u);
  BOOST_TEST(done.stage_out.geometry_key == 0u);  // the message sent is not changed

  RunTask rt;
  rt.stage_in = at_scheduler.stage_out;
  const auto [to_worker, at_worker] = cross(coordinator, worker, rt);
  BOOST_TEST_REQUIRE(to_worker);
  BOOST_TEST(at_worker.stage_in.geometry == geometry);  // the same object
  BOOST_TEST(at_worker.stage_in.geometry_key == 0u);
  BOOST_TEST(values_of(at_worker.stage_in.tensor) == (std::vector<float>{1, 2}));
  BOOST_TEST(worker.exports() == 0u);  // the tensor's handle was used

  RunTask geometry_only;
  geometry_only.stage_in.geometry_owner = rt.stage_in.geometry_owner;
  geometry_only.stage_in.geometry_key = rt.stage_in.geometry_key;
  BOOST_TEST(cross(coordinator, worker, geometry_only).second.stage_in.geometry == geometry);
  worker.forget_exports();  // the step ended
  BOOST_TEST(!cross(coordinator, worker, geometry_only).first);
}

// A rank of a GPU dp group spanning processes, its GPU and (rank 0's) the
// NCCL unique id, goes from its process (Joined) to every process
// (ConnectPeers), registered as the run over processes registers it.
// (Those two messages hold actor handles, which deserialise only through
// the middleman: the runs over processes of tests/e2e carry them.)
BOOST_FIXTURE_TEST_CASE(an_nccl_rank_entry_crosses_whole, ProcessSystem) {
  std::vector<uint8_t> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(i * 37 + 1);
  const NcclRankEntry back = round_trip(NcclRankEntry{2, 1, 3, 0, "node-1/0000:3b:00.0", id});
  BOOST_TEST(back.section == 2);
  BOOST_TEST(back.stage == 1);
  BOOST_TEST(back.tp_rank == 3);
  BOOST_TEST(back.replica == 0);
  BOOST_TEST(back.gpu == "node-1/0000:3b:00.0");
  BOOST_TEST((back.id == id));
}
