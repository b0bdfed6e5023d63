// The messages the runtime's actors exchange. Each is a small struct: bulk
// tensors travel as TensorRef handles (transport/), step inputs as a shared
// pointer to read-only StepData. Replies carry an `error` string (empty on
// success) so that a failing task ends the run with a message naming the
// section, replica and step instead of an actor crash.
//
// Every message may cross a process: each has an `inspect` overload (below;
// its payloads' in wire_format.h) and add_message_types() registers them by
// name on an actor system. In process nothing is serialised: TensorRefs and
// the StepData pointer are handed over as they are; a RunTask leaving the
// process carries only the part of the StepData its task reads (task_data).
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/step_data.h"
#include "actors/trace.h"
#include "actors/wire_format.h"
#include "plan/schedule.h"
#include "transport/tensor_ref.h"

namespace maestro {

struct StageGeometry;  // nn/section_model.h: a micro-batch's layout, built by stage 0

// A pipeline stage's hand-off for one micro-batch, inside a section replica:
// forward, the stage's hidden states [N, hidden] and their layout for the
// next stage; backward, the gradient of the stage's input for the previous.
struct StageTensor {
  TensorRef tensor;
  std::shared_ptr<const StageGeometry> geometry;  // forward only
  // Where the geometry is kept when this copy came from another process
  // (the scheduler's, between a worker's stages): its owner's transport id
  // and key (TensorExporter::export_geometry); 0 when `geometry` is here.
  uint64_t geometry_owner = 0, geometry_key = 0;
  bool empty() const { return tensor.empty(); }
};

// One tensor crossing a flow for one sample: an upstream section's output
// (forward) or the gradient of it (backward).
struct FlowTensor {
  int32_t flow = 0;    // index into SectionGraph::edges (= Program::flows)
  int32_t sample = 0;  // index into Batch::samples
  TensorRef tensor;
};

// scheduler -> replica -> worker: run one task.
struct RunTask {
  int64_t step = 0;
  Task task;                       // the Schedule's task (its deps are the scheduler's business)
  std::vector<int32_t> samples;    // its micro-batch: indices into Batch::samples, in micro-batch order
  std::vector<FlowTensor> inputs;  // forward: upstream outputs; backward: gradients of this section's outputs
  std::shared_ptr<const StepData> data;
  StageTensor stage_in;  // from the neighbouring stage: after the first (forward), before the last (backward)
};

// worker -> replica -> scheduler.
struct TaskDone {
  int64_t step = 0;
  int64_t task = 0;
  std::vector<FlowTensor> outputs;  // forward: outputs per outgoing flow; backward: input gradients per incoming flow
  int64_t begin_us = 0, duration_us = 0;
  std::string error;
  StageTensor stage_out;  // forward before the last stage / backward after the first: for the neighbouring stage
  int64_t memory_bytes = 0;  // what the worker's runner holds after the task (SectionRunner::memory_bytes)
};

// scheduler -> every replica, once every task of the step is done: sum the
// gradients over the section's data-parallel group (each replica through
// its Communicator, transport/collectives.h) and report what the step
// left in the replica's scalar accumulators, read back in one go.
struct ReduceGrads {
  int64_t step = 0;
};
// A forward task's share of the step's loss (loss sections only).
struct TaskLoss {
  int64_t task = 0;
  double loss = 0;
};
struct GradsReduced {
  int section = 0, stage = 0, replica = 0;
  double grad_sq_norm = 0;      // Σ g² of the reduced gradients (train sections; equal on every replica of a group)
  std::vector<TaskLoss> losses; // this replica's forward tasks of the step
  std::string error;
};

// scheduler -> replica of a train section: scale the reduced gradients by
// the clip coefficient, take one AdamW step at this learning rate, zero them.
struct ApplyGrads {
  int64_t step = 0;
  double scale = 1;
  double lr = 0;
};
struct Applied {
  int section = 0, stage = 0, replica = 0;
  std::string error;
};

// checkpointer -> replica 0 of a section: write parameters + AdamW state;
// with a sharded optimizer, also -> the group's other replicas with path ""
// (they take part in gathering the state, write nothing).
struct SaveSection {
  std::string path;
};
struct Saved {
  int section = 0;
  std::string error;
};

// scheduler -> data loader: the batch of this step (prefetched).
struct GetBatch {
  int64_t step = 0;
};
struct BatchReady {
  std::shared_ptr<const StepData> data;
  std::string error;
  bool bad_input = false;  // the error is the data's (a corrupt file found while decoding): exit 2
};

// scheduler -> checkpointer: checkpoint after `step` steps.
struct WriteCheckpoint {
  int64_t steps_done = 0;
  int64_t samples = 0;
  std::vector<double> losses;
};
struct CheckpointWritten {
  std::string dir;
  std::string error;
};

// driver -> scheduler: train steps [first_step, last_step).
struct StartTraining {
  int64_t first_step = 0, last_step = 0;
};

// scheduler -> driver: one finished step; the run's end.
struct StepReport {
  int64_t step = 0;
  double loss = 0;
  int64_t samples = 0;
  double step_s = 0;
  double sched_s = 0;  // time the scheduler spent issuing and routing this step
};
struct TrainingEnded {
  int64_t steps_done = 0;
  std::string checkpoint;  // last checkpoint written, "" = none
  std::string error;       // "" = success
  bool interrupted = false;
  bool bad_input = false;  // the error is bad input (exit 2), not a runtime fault (exit 1)
};

// anyone -> tracer; driver -> tracer at the end: write the file.
struct FlushTrace {
  std::string path;
};

// repl -> any runtime actor: describe yourself (actors/repl.h). Every actor
// kind answers with the same ActorInfo, its own figures in `detail`.
struct Describe {
  int32_t unused = 0;
};
struct ActorInfo {
  std::string name;   // as `topology` lists it: "scheduler", "llm/0 replica"
  std::string kind;   // scheduler | loader | checkpointer | tracer | section-replica | ...
  std::string section;
  int32_t stage = -1, replica = -1;
  int64_t process = 0;  // pid
  std::string host, device;
  int64_t mailbox = 0;  // messages waiting in its mailbox
  std::string state;    // idle | running forward mb 3 | paused before step 7 | ...
  std::string detail;   // a JSON object of the kind's own figures
};

// repl -> scheduler: steer the run at step boundaries. Replies a std::string
// saying what happens, or an error text starting "error: ".
struct SteerRun {
  enum Kind : int32_t { Pause, Resume, Step, Checkpoint, Quit };
  int32_t kind = Pause;
  int64_t count = 0;  // Step
};

// repl -> tracer: record the Chrome trace from now into `path` (start) or
// write what was recorded (stop). Replies a std::string ("error: ..." on failure).
struct RecordTrace {
  bool start = false;
  std::string path;
};

// ------------------------------------------------------------ serialising

// A stage's hand-off: the tensor as any tensor (wire_format.h). The
// geometry is the engine's opaque, polymorphic layout (nn/model_impl.h),
// shared between the stages of one replica, which run in one process: it
// crosses as a handle (the exporter's owner and key) and becomes the
// geometry again when it arrives back at its owner, on its way from the
// scheduler to the next stage. Without an exporter (no run across
// processes) serialising one fails with a clear error rather than dropping it.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StageTensor& x) {
  uint64_t owner = x.geometry_owner, key = x.geometry_key;
  bool unexportable = false;
  if constexpr (Inspector::reads_state) {
    if (x.geometry) {
      if (TensorExporter* exporter = tensor_exporter().load())
        owner = exporter->owner(), key = exporter->export_geometry(x.geometry);
      else
        unexportable = true;
    }
  }
  auto refuse = caf::meta::save_callback([&]() -> caf::error {
    if (unexportable)
      return caf::make_error(caf::sec::state_not_serializable,
                             "a pipeline stage's geometry crosses processes only in a run over processes");
    return caf::none;
  });
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.geometry.reset();
    x.geometry_owner = owner, x.geometry_key = key;
    if (key == 0) return caf::none;
    TensorExporter* exporter = tensor_exporter().load();
    if (!exporter)
      return caf::make_error(caf::sec::invalid_argument, "a stage geometry handle arrived in a process that imports none");
    if (owner != exporter->owner()) return caf::none;  // stays a handle
    x.geometry = exporter->exported_geometry(key);
    if (!x.geometry)
      return caf::make_error(caf::sec::invalid_argument,
                             "stage geometry handle " + std::to_string(key) + " is not (or no longer) kept here");
    x.geometry_owner = x.geometry_key = 0;
    return caf::none;
  });
  return f(caf::meta::type_name("StageTensor"), x.tensor, refuse, owner, key, load);
}

MAESTRO_INSPECT(FlowTensor, x.flow, x.sample, x.tensor)
// What a task reads of its step's data (SectionRunner::forward_rank): its
// section's inputs for its own samples, and the loss normalisers; a
// backward task reads no inputs. A RunTask crossing a process carries only
// that (the other samples' and sections' inputs stay empty, indices kept;
// the batch keeps its step, not its samples), so a step's pixels, mel
// frames and token ids cross once per forward task that reads them, not
// whole with every task (PERFORMANCE.md §8).
inline std::shared_ptr<const StepData> task_data(const RunTask& x) {
  if (!x.data) return nullptr;
  auto out = std::make_shared<StepData>();
  out->batch.step = x.data->batch.step;
  out->loss_positions = x.data->loss_positions;
  const size_t s = size_t(x.task.section);
  if (x.task.kind == Task::Kind::Forward && s < x.data->inputs.size() && !x.data->inputs[s].empty()) {
    const std::vector<SampleInputs>& all = x.data->inputs[s];
    out->inputs.resize(s + 1);
    out->inputs[s].resize(all.size());
    for (int32_t i : x.samples)
      if (i >= 0 && size_t(i) < all.size()) out->inputs[s][size_t(i)] = all[size_t(i)];
  }
  return out;
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunTask& x) {
  std::shared_ptr<const StepData> data;
  if constexpr (Inspector::reads_state) data = task_data(x);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.data = std::move(data);
    return caf::none;
  });
  return f(caf::meta::type_name("RunTask"), x.step, x.task, x.samples, x.inputs, data, x.stage_in, load);
}
MAESTRO_INSPECT(TaskDone, x.step, x.task, x.outputs, x.begin_us, x.duration_us, x.error, x.stage_out, x.memory_bytes)
MAESTRO_INSPECT(ReduceGrads, x.step)
MAESTRO_INSPECT(TaskLoss, x.task, x.loss)
MAESTRO_INSPECT(GradsReduced, x.section, x.stage, x.replica, x.grad_sq_norm, x.losses, x.error)
MAESTRO_INSPECT(ApplyGrads, x.step, x.scale, x.lr)
MAESTRO_INSPECT(Applied, x.section, x.stage, x.replica, x.error)
MAESTRO_INSPECT(SaveSection, x.path)
MAESTRO_INSPECT(Saved, x.section, x.error)
MAESTRO_INSPECT(GetBatch, x.step)
MAESTRO_INSPECT(BatchReady, x.data, x.error, x.bad_input)
MAESTRO_INSPECT(WriteCheckpoint, x.steps_done, x.samples, x.losses)
MAESTRO_INSPECT(CheckpointWritten, x.dir, x.error)
MAESTRO_INSPECT(StartTraining, x.first_step, x.last_step)
MAESTRO_INSPECT(StepReport, x.step, x.loss, x.samples, x.step_s, x.sched_s)
MAESTRO_INSPECT(TrainingEnded, x.steps_done, x.checkpoint, x.error, x.interrupted, x.bad_input)
MAESTRO_INSPECT(TraceEvent, x.track, x.name, x.category, x.begin_us, x.duration_us)
MAESTRO_INSPECT(FlushTrace, x.path)
MAESTRO_INSPECT(Describe, x.unused)
MAESTRO_INSPECT(ActorInfo, x.name, x.kind, x.section, x.stage, x.replica, x.process, x.host, x.device, x.mailbox,
                x.state, x.detail)
MAESTRO_INSPECT(SteerRun, x.kind, x.count)
MAESTRO_INSPECT(RecordTrace, x.start, x.path)

// Registers every message above by name ("maestro.RunTask", ...), as both
// ends of a cross-process hop must.
inline void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<RunTask>("maestro.RunTask")
      .add_message_type<TaskDone>("maestro.TaskDone")
      .add_message_type<ReduceGrads>("maestro.ReduceGrads")
      .add_message_type<GradsReduced>("maestro.GradsReduced")
      .add_message_type<ApplyGrads>("maestro.ApplyGrads")
      .add_message_type<Applied>("maestro.Applied")
      .add_message_type<SaveSection>("maestro.SaveSection")
      .add_message_type<Saved>("maestro.Saved")
      .add_message_type<GetBatch>("maestro.GetBatch")
      .add_message_type<BatchReady>("maestro.BatchReady")
      .add_message_type<WriteCheckpoint>("maestro.WriteCheckpoint")
      .add_message_type<CheckpointWritten>("maestro.CheckpointWritten")
      .add_message_type<StartTraining>("maestro.StartTraining")
      .add_message_type<StepReport>("maestro.StepReport")
      .add_message_type<TrainingEnded>("maestro.TrainingEnded")
      .add_message_type<TraceEvent>("maestro.TraceEvent")
      .add_message_type<FlushTrace>("maestro.FlushTrace")
      .add_message_type<Describe>("maestro.Describe")
      .add_message_type<ActorInfo>("maestro.ActorInfo")
      .add_message_type<SteerRun>("maestro.SteerRun")
      .add_message_type<RecordTrace>("maestro.RecordTrace");
}

}  // namespace maestro
