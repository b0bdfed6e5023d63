// The messages the runtime's actors exchange. Each is a small struct: bulk
// tensors travel as TensorRef handles (transport/), step inputs as a shared
// pointer to read-only StepData. Replies carry an `error` string (empty on
// success) so that a failing task ends the run with a message naming the
// section, replica and step instead of an actor crash.
//
// Types that hold process-local handles are whitelisted for local messaging
// only (CAF_ALLOW_UNSAFE_MESSAGE_TYPE); across processes a tensor travels as
// its TensorDescriptor (transport/transport.h, which has an `inspect`). The
// end-of-step messages hold no handles and have `inspect` overloads.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/step_data.h"
#include "actors/step_graph.h"
#include "actors/trace.h"
#include "transport/tensor_ref.h"

namespace maestro {

struct StageGeometry;  // nn/section_model.h: a micro-batch's layout, built by stage 0

// A pipeline stage's hand-off for one micro-batch, inside a section replica:
// forward, the stage's hidden states [N, hidden] and their layout for the
// next stage; backward, the gradient of the stage's input for the previous.
struct StageTensor {
  TensorRef tensor;
  std::shared_ptr<const StageGeometry> geometry;  // forward only
  bool empty() const { return tensor.empty(); }
};

// One tensor crossing a flow for one sample: an upstream section's output
// (forward) or the gradient of it (backward).
struct FlowTensor {
  int32_t flow = 0;    // index into Program::flows
  int32_t sample = 0;  // index into Batch::samples
  TensorRef tensor;
};

// scheduler -> replica -> worker: run one task.
struct RunTask {
  int64_t step = 0;
  StepTask task;
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

// The end-of-step messages carry no handles: serialisable, so the replicas
// of a section may live in other processes.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReduceGrads& x) {
  return f(caf::meta::type_name("ReduceGrads"), x.step);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TaskLoss& x) {
  return f(caf::meta::type_name("TaskLoss"), x.task, x.loss);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GradsReduced& x) {
  return f(caf::meta::type_name("GradsReduced"), x.section, x.stage, x.replica, x.grad_sq_norm, x.losses, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ApplyGrads& x) {
  return f(caf::meta::type_name("ApplyGrads"), x.step, x.scale, x.lr);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Applied& x) {
  return f(caf::meta::type_name("Applied"), x.section, x.stage, x.replica, x.error);
}

// checkpointer -> replica 0 of a section: write parameters + AdamW state.
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
};

// anyone -> tracer; driver -> tracer at the end: write the file.
struct FlushTrace {
  std::string path;
};

}  // namespace maestro

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::RunTask)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::TaskDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::SaveSection)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::Saved)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::GetBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::BatchReady)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::WriteCheckpoint)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::CheckpointWritten)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::StartTraining)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::StepReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::TrainingEnded)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::TraceEvent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::FlushTrace)
