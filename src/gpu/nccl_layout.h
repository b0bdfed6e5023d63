// The NCCL communicators a plan needs (plan/plan.h): host code, unit-tested
// here. A section's devices [first_device, first_device + tp·pp·dp) are
// numbered Megatron-style, tensor-parallel ranks innermost, then data-
// parallel replicas, pipeline stages outermost:
//   device(stage k, replica r, tp rank t) = first_device + (k·dp + r)·tp + t.
// Each (section, stage, tp rank) has a dp group over its replicas (gradient
// all-reduce, ZeRO-1 reduce-scatter/all-gather) and each (section, stage,
// replica) a tp group over its tp ranks; groups of one member are left out
// (nothing to communicate). A group's NCCL rank i is its devices[i].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace maestro {

class Communicator;  // transport/collectives.h

struct CommGroup {
  enum class Kind { DataParallel, TensorParallel } kind;
  int section = 0;
  int64_t stage = 0;
  int64_t index = 0;         // the tp rank (dp groups) or the replica (tp groups)
  std::vector<int> devices;  // NCCL rank i -> device
  std::string name() const;  // "section 1 stage 0 dp group (tp rank 1)"
};

// Device of one rank of a section (the numbering above).
int64_t section_device(const SectionPlan& s, int64_t stage, int64_t replica, int64_t tp_rank);

// Every group of every section of the plan, in section, stage, kind order.
// Throws std::invalid_argument for a section whose devices count differs from tp·pp·dp.
std::vector<CommGroup> plan_comm_groups(const Plan& plan);

// On a machine with `gpus` CUDA devices the plan's device numbers wrap
// around (a CPU-sized plan may number more devices than there are; sections
// numbered on the same device share that GPU, each replica on its own stream).
int physical_device(int64_t plan_device, int gpus);
// The CUDA devices of section `section`'s stage-`stage` dp group of tp rank
// `tp_rank`, NCCL rank order, on `gpus` devices.
std::vector<int> dp_group_devices(const Plan& plan, int section, int64_t stage, int gpus, int64_t tp_rank = 0);
// The CUDA devices of the tp group of replica `replica` of that stage.
std::vector<int> tp_group_devices(const Plan& plan, int section, int64_t stage, int64_t replica, int gpus);
// Why the plan's dp and tp groups cannot run over NCCL in one process on
// `gpus` devices ("" when they can): NCCL missing from the build, or a group
// whose ranks would share a GPU (one process cannot hold two ranks of a
// communicator on one device). Names the section by section_names[s].
std::string nccl_refusal(const Plan& plan, const std::vector<std::string>& section_names, int gpus, bool nccl_built);
// Its part for the groups of one section stage (section `section`, stage
// `stage`, named `name`): every tp rank's dp group and every replica's tp
// group — what each process of a run over processes checks for the dp
// groups it holds whole (groups spanning processes reduce over the transfer
// engine instead).
std::string nccl_group_refusal(const Plan& plan, int section, int64_t stage, const std::string& name, int gpus,
                               bool nccl_built);
// Over processes, tp > 1 on the CUDA backend is refused: "" when every
// section has tp = 1.
std::string nccl_tp_refusal(const Plan& plan, const std::vector<std::string>& section_names);

// A dp group whose replicas several processes host is, on the CUDA backend,
// one NCCL communicator across them (gpu/cuda/nccl_communicator.h) when no
// two of its ranks share a GPU — NCCL holds one rank per device — and the
// staged ring otherwise. Which ranks share one: "" for none, else "ranks 0
// and 2 share the GPU node-1/0000:3b:00.0". gpu_of_rank[r]: rank r's
// host name and PCI bus id (cuda_pci_bus_id, gpu/device_query.h).
std::string shared_gpu(const std::vector<std::string>& gpu_of_rank);
// One of this process's ranks of such a group and its communicator's
// unique id (the group's rank-0 process made it): what connecting takes.
struct NcclConnection {
  std::shared_ptr<Communicator> rank;
  std::vector<uint8_t> id;
  std::string group;  // "section 'llm' stage 0 dp group": what errors name
};

}  // namespace maestro
