// SectionRunner: one section replica's model and the work the runtime asks
// of it, over the engine (nn/section_model.h). It turns a task's flow
// tensors and step data into the engine's per-sample inputs, keeps each
// micro-batch's forward context until its backward, and turns the engine's
// outputs back into TensorRefs from the transport. Plain C++: the worker
// actor calls it, nothing here knows about CAF. The Backend is injected
// (chosen by gpu/backend_factory.h); host data crosses into and out of it
// only by the backend's explicit copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "actors/run_plan.h"
#include "dsl/program.h"
#include "transport/collectives.h"
#include "transport/transport.h"

namespace maestro {

// "llm", or "llm.stage1" for stage 1 of a section split into stages: the
// name of a part's checkpoint file and trace track.
std::string part_name(const std::string& section, int stage, int stages);

class SectionModel;  // nn/section_model.h
struct RowsView;     // nn/section_model.h
class Backend;       // nn/backend.h

class SectionRunner {
 public:
  // Creates the section's model: random init from `seed`, then the
  // section's `weights` file when it names one. Throws std::runtime_error
  // naming the section on a missing or mismatched weights file.
  // `backend`: this replica's own (make_backend). `dp_group`: this
  // replica's rank in the section's (and stage's) data-parallel group; null
  // = a group of one. Pipeline stage `stage` of `stages` holds that stage's
  // layers only (nn/section_model.h); stages = 1 is the whole section.
  // `tp_group`: this runner's tensor-parallel group (its rank is the runner's
  // tp rank; null = tp 1): the replica's ranks run every call together
  // (collectives inside), and rank 0's results stand for the replica —
  // the other ranks return no outputs. A split transformer's logits
  // leaving by a (logits) flow are gathered whole on rank 0. A failing rank
  // aborts the group, so its peers fail too instead of waiting.
  // `shard_optimizer`: ZeRO-1 over the dp group when it has more than one
  // replica (run_shards_optimizer: the program's adamw(shard:) or the plan's).
  // `recompute`: how many of the section's layers (spread evenly,
  // recomputes_layer) keep their input only and are recomputed in backward
  // (the plan's `recomputed_layers`); the program's `recompute` when larger.
  // `recompute_stage` (the plan's `recomputes_stage`): between a micro-batch's
  // forward and backward keep only the task (its input tensors) and run the
  // forward again (and a loss stage its loss) before the backward — the same
  // results, none of the stage's activations held meanwhile.
  // `resident_handoffs` (a run in one process on GPUs): what this runner
  // hands on stays in its backend's memory — a block of the backend, copied
  // device to device and marked ready (Backend::ready_marker) — and the
  // consumer's backend waits for the marker and copies it device to
  // device, or from another GPU peer to peer: no trip through host memory
  // and no wait for the device (a tp > 1 transformer's logits are gathered
  // and laid side by side in backend memory too; the gradients of an output
  // with several consumers are summed in the producer's backend memory,
  // with or without it). While this runner's blocks in flight would pass
  // an eighth of its GPU's memory (kResidentShare; a producer that runs
  // ahead of its consumer, a KD teacher's logits), a hand-off goes through
  // host memory instead.
  SectionRunner(const Program& program, int section, int stage, int stages, uint64_t seed, Transport& transport,
                std::unique_ptr<Backend> backend, std::shared_ptr<Communicator> dp_group,
                std::shared_ptr<Communicator> tp_group, bool shard_optimizer, int64_t recompute = 0,
                bool recompute_stage = false, bool resident_handoffs = false);
  ~SectionRunner();
  // The layers whose activations the engine recomputes in backward.
  int64_t recomputed_layers() const;
  bool recomputes_stage() const { return recompute_stage_; }

  struct Result {
    // forward (last stage): outputs per outgoing flow and sample; backward
    // (stage 0): gradients of the spliced inputs per incoming activations
    // flow and sample.
    std::vector<FlowTensor> outputs;
    StageTensor stage_out;            // for the neighbouring stage (see messages.h)
  };
  // Runs the forward of a micro-batch and keeps its context for backward;
  // a loss section's loss is queued into the step's scalar accumulators.
  Result forward(const RunTask& task);
  // Runs the backward of a forward done earlier, accumulating (+=) into the
  // parameter gradients.
  Result backward(const RunTask& task);

  // End of step, on every replica of the group together: all-reduces the
  // gradients over the data-parallel group (train sections; with a sharded
  // optimizer, reduce-scatters them: each replica sums its shard, and the
  // norm² is the group's sum of shard norm²s), queues their norm², then reads the step's scalars (the forwards' losses, the norm²)
  // back — the replica's one wait for its backend in a step.
  struct StepScalars {
    std::vector<TaskLoss> losses;  // forward tasks of the step, in run order
    double grad_sq_norm = 0;
  };
  StepScalars reduce_grads();
  // AdamW step at lr on the gradients times scale (clipping); grads = 0.
  void apply(double scale, double lr);

  // Parameters + AdamW state, under the section prefix. Sharded optimizer:
  // every replica of the group saves together (the state is gathered), and
  // a replica given path "" writes nothing.
  void save(const std::string& path);
  void load(const std::string& path);
  // ZeRO-1 (shard_optimizer with dp > 1): the AdamW moments
  // this replica holds, in bytes, and whether they are its shard only.
  size_t optimizer_state_bytes() const;
  // Host bytes this runner's model holds now: parameters, gradients,
  // optimizer state and the activation pool (which grows to the most
  // micro-batches in flight, then stays).
  size_t memory_bytes() const;
  size_t unsharded_optimizer_state_bytes() const;  // 2 moments × every parameter of this part
  bool optimizer_sharded() const;

  const std::string& section_name() const;
  std::string part_name() const;  // part_name(section, stage, stages)
  int tp_rank() const { return tp_group_ ? tp_group_->rank() : 0; }

 private:
  const Program& program_;
  int section_, stage_, stages_;
  Transport& transport_;
  // The tensors whose bytes the engine uploaded with copy_from_host_held
  // (a task's inputs; the sums of fan-in gradients; a replayed forward's
  // task), kept until the backend passes the fence taken after the call
  // that uploaded them: a GPU may still be reading them. Oldest first.
  // Declared before backend_, so the backend (which waits for its work
  // when destroyed) goes first.
  struct Held {
    uint64_t fence = ~uint64_t(0);  // ~0 while the call runs
    std::vector<RunTask> tasks;
    std::vector<TensorRef> tensors;
  };
  std::deque<Held> held_;
  // Shared with the resident hand-offs it made, whose blocks go back to it
  // when their last reader lets go (which may be after this runner).
  std::shared_ptr<Backend> backend_;
  bool resident_ = false;
  // Bytes of this runner's blocks (kept) not yet given back, shared with
  // their deleters; resident hand-offs stay under
  // backend_->device_memory_bytes() / kResidentShare.
  static constexpr size_t kResidentShare = kResidentHandoffShare;  // as the plan counts them (run_plan.h)
  std::shared_ptr<std::atomic<size_t>> resident_bytes_ = std::make_shared<std::atomic<size_t>>(0);
  std::shared_ptr<Communicator> dp_group_, tp_group_;
  bool recompute_stage_ = false;
  std::unique_ptr<SectionModel> model_;
  struct Pending;
  std::map<int64_t, Pending> pending_;  // micro-batch id -> its forward, until its backward
  // The step's scalar accumulators in backend memory: slots [0, used_)
  // of chunks of kSlots doubles, read back by reduce_grads().
  static constexpr size_t kSlots = 256;
  std::vector<double*> chunks_;
  size_t used_ = 0;
  struct QueuedLoss {
    int64_t task = 0, n_global = 0;
    size_t slot = 0;  // its terms' raw sums: [slot, slot + loss terms)
  };
  std::vector<QueuedLoss> queued_losses_;
  size_t take_slots(size_t n);  // n consecutive slots in one chunk
  double group_sq_norm(double mine);  // sharded: Σ_rank shard norm², in rank order
  bool tp_rank0() const;
  // f(), aborting the tp group when it throws.
  template <class F>
  auto on_all_ranks(F&& f) -> decltype(f());
  // f() with rt's tensors held (held_), also when f throws.
  template <class F>
  auto holding(const RunTask& rt, F&& f) -> decltype(f());
  void release_passed();  // drops the held tensors whose fence the backend has passed
  struct EngineInputs;
  EngineInputs inputs_of(const RunTask& task) const;
  Result forward_rank(const RunTask& task);
  Result backward_rank(const RunTask& task);
  StepScalars reduce_grads_rank();
  TensorRef logits_of(const RowsView& v);
  // What this runner hands on of backend memory `src`: a resident hand-off
  // (above), else a host copy from the transport.  [shape]
  TensorRef hand_off(std::vector<int64_t> shape, const float* src);
  // Whether a resident hand-off of `bytes` more stays under the budget above.
  bool fits_resident(size_t bytes) const;
  // A tensor of `shape` in a block of this backend's memory, which
  // write(block, numel) fills (queued on this backend), then marked ready:
  // a resident hand-off, or a sum of fan-in gradients.
  TensorRef kept(std::vector<int64_t> shape, const std::function<void(float*, size_t)>& write);
  // An incoming tensor's floats for the engine's held uploads: host memory,
  // or a resident hand-off's device memory once this backend waits for it.
  std::span<const float> floats_of(const TensorRef& t) const;
  double* slot(size_t i) { return chunks_[i / kSlots] + i % kSlots; }
};

}  // namespace maestro
