// The messages the runtime's actors exchange. Each is a small struct: bulk
// tensors travel as TensorRef handles (transport/), step inputs as a shared
// pointer to read-only StepData. Replies carry an `error` string (empty on
// success) so that a failing task ends the run with a message naming the
// section, replica and step instead of an actor crash.
//
// These types hold process-local handles, so they are whitelisted for local
// messaging only (CAF_ALLOW_UNSAFE_MESSAGE_TYPE); a cross-process transport
// serialises a TensorRef as (buffer id, offset, bytes) instead.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/step_data.h"
#include "actors/trace.h"
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
  double loss = 0;                  // forward of a loss section: its share of the step's loss
  int64_t begin_us = 0, duration_us = 0;
  std::string error;
  StageTensor stage_out;  // forward before the last stage / backward after the first: for the neighbouring stage
};

// scheduler -> replica: hand over the summed gradient buffer (end of step).
struct GetGrads {
  int64_t step = 0;
};
struct Grads {
  int section = 0, stage = 0, replica = 0;
  TensorRef grads;  // [section's parameter count], flat in the engine's order
  std::string error;
};

// scheduler -> replica: set grads to the all-reduced sum, scale by the clip
// coefficient, take one AdamW step at this learning rate, zero the grads.
struct ApplyGrads {
  int64_t step = 0;
  TensorRef summed;  // [parameter count]
  double scale = 1;
  double lr = 0;
};
struct Applied {
  int section = 0, stage = 0, replica = 0;
  std::string error;
};

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
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::GetGrads)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::Grads)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::ApplyGrads)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::Applied)
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
