// The emulator's scheduler and runtime (cuda_emulator.h): a block's threads
// as fibers on the calling thread, barriers that count every thread of the
// block (or lane of the warp), and the launch checks. On x86-64 a switch
// between fibers is a few instructions (below); elsewhere ucontext, whose
// every switch is a system call (the signal mask): the same, slower.
#include "cuda_emulator.h"

#include <fmt/format.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MAESTRO_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MAESTRO_EMU_ASAN 1
#endif
#endif
#ifdef MAESTRO_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// maestro_emu_switch(save, load): pushes the callee-saved registers and the
// SSE / x87 control words on the current stack, stores the stack pointer in
// *save, then loads `load` and pops what a switch (or make_context) put
// there. The System V ABI needs nothing else kept across a call.
extern "C" void maestro_emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl maestro_emu_switch
  .type maestro_emu_switch, @function
maestro_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size maestro_emu_switch, .-maestro_emu_switch
  .section .note.GNU-stack,"",@progbits
)");
#endif

namespace emu {
namespace {

constexpr size_t kStackBytes = size_t(256) << 10;  // a thread's registers (kernels' local arrays) live here
constexpr unsigned kMaxThreads = 1024;
constexpr int kDefaultShared = 48 << 10;
constexpr int kMaxShared = 99 << 10;  // compute capability 8.6's opt-in limit, the least of 8.0-9.0
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kGatherBytes = 32;  // warp_gather's bytes a lane (an mma.sync's A and B fragments: 24)

enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

// A suspended fiber (or the scheduler).
struct Context {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// A fiber that starts `entry` on stack[0, bytes) when first switched to.
void make_context(Context& c, unsigned char* stack, size_t bytes, void (*entry)()) {
#if defined(__x86_64__)
  auto* p = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15));
  *--p = 0;                                  // entry's return address: it never returns
  *--p = reinterpret_cast<uint64_t>(entry);  // popped by the switch's ret
  for (int r = 0; r < 6; ++r) *--p = 0;      // rbp, rbx, r12-r15
  *--p = 0x037f'00001f80ull;                 // x87 control word, MXCSR: the defaults
  c.sp = p;
#else
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
#endif
}

void switch_context(Context& save, Context& load) {
#if defined(__x86_64__)
  maestro_emu_switch(&save.sp, load.sp);
#else
  swapcontext(&save.uc, &load.uc);
#endif
}

struct Fiber {
  Context ctx;
  State state = State::Ready;
  uint3 tid{0, 0, 0};
  unsigned gathers = 0;  // warp_gather calls so far: which of two buffers the next one uses
  // cp.async: the committed groups not yet landed, oldest first, and the open one.
  struct Copy {
    unsigned char* dst;
    const unsigned char* src;  // null: zeros
  };
  std::deque<std::vector<Copy>> copy_groups;
  std::vector<Copy> open_copies;
};

// The running block.
struct Block {
  const char* kernel = "";
  uint3 bid{0, 0, 0};
  unsigned n = 0;  // threads
  unsigned current = 0;
  unsigned done = 0, block_waiting = 0;
  unsigned warp_waiting[kMaxThreads / 32] = {};
  uint64_t exchange[kMaxThreads] = {};
  // warp_gather's two buffers, used in turn: a lane that has read one
  // gather may write the next while its warp's slower lanes still read.
  unsigned char gather[2][kMaxThreads][kGatherBytes] = {};
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  const std::function<void()>* thread = nullptr;
  std::exception_ptr error;
  std::vector<Fiber> fibers;
};

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};

thread_local Block* g_block = nullptr;
thread_local Context g_scheduler;
thread_local Schedule g_schedule = Schedule::ThreadOrder;
thread_local Counts g_counts;
thread_local cudaError_t g_last_error = cudaSuccess;
thread_local std::string g_last_message;
thread_local std::map<const void*, int> g_max_shared;
thread_local std::vector<unsigned char*> g_stacks;  // one per thread of the largest block so far
#ifdef MAESTRO_EMU_ASAN
thread_local const void* g_scheduler_bottom = nullptr;
thread_local size_t g_scheduler_size = 0;
#endif

Block& block() {
  if (!g_block) throw KernelFault("a device function was called outside a kernel launch");
  return *g_block;
}
Fiber& me() { return block().fibers[block().current]; }

std::string where() {
  const Block& b = block();
  const Fiber& f = b.fibers[b.current];
  return fmt::format("kernel {}, block ({},{},{}), thread ({},{},{})", b.kernel, b.bid.x, b.bid.y, b.bid.z, f.tid.x,
                     f.tid.y, f.tid.z);
}

unsigned warp_lanes(const Block& b, unsigned warp) { return std::min(32u, b.n - 32 * warp); }

// Back to the scheduler until a barrier lets this thread go on.
void yield() {
  Fiber& f = me();
#ifdef MAESTRO_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g_scheduler_bottom, g_scheduler_size);
#endif
  switch_context(f.ctx, g_scheduler);
#ifdef MAESTRO_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

[[noreturn]] void run_thread() {
#ifdef MAESTRO_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_scheduler_bottom, &g_scheduler_size);
#endif
  Block& b = *g_block;
  try {
    (*b.thread)();
  } catch (...) {
    if (!b.error) b.error = std::current_exception();
  }
  Fiber& f = b.fibers[b.current];
  f.state = State::Done;
  ++b.done;
#ifdef MAESTRO_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_scheduler_bottom, g_scheduler_size);
#endif
  switch_context(f.ctx, g_scheduler);  // never resumed
  std::abort();
}

void resume(Block& b, unsigned i) {
  b.current = i;
  threadIdx = b.fibers[i].tid;
#ifdef MAESTRO_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g_stacks[i], kStackBytes);
#endif
  switch_context(g_scheduler, b.fibers[i].ctx);
#ifdef MAESTRO_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

std::string stuck(const Block& b) {
  unsigned at_block = 0, at_warp = 0;
  for (const Fiber& f : b.fibers) {
    at_block += f.state == State::AtBlockBarrier;
    at_warp += f.state == State::AtWarpBarrier;
  }
  return fmt::format(
      "kernel {}, block ({},{},{}): a barrier not every thread reaches ({} of {} threads at "
      "__syncthreads, {} at a warp barrier, {} ended)",
      b.kernel, b.bid.x, b.bid.y, b.bid.z, at_block, b.n, at_warp, b.done);
}

// Thread i of the block, about to start.
void prepare(Fiber& f, unsigned i) {
  f.state = State::Ready;
  f.gathers = 0;
  f.copy_groups.clear();
  f.open_copies.clear();
  f.tid = {i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y)};
  make_context(f.ctx, g_stacks[i], kStackBytes, run_thread);
}

void run_block(Block& b) {
  b.done = b.block_waiting = 0;
  std::fill(std::begin(b.warp_waiting), std::end(b.warp_waiting), 0u);
  for (unsigned i = 0; i < b.n; ++i) prepare(b.fibers[i], i);
  // Each warp in turn runs as far as it can (its lanes resumed until none
  // is ready) before the next starts: a warp that reads what another warp
  // was to write before a __syncthreads that is missing finds it unwritten.
  const unsigned warps = (b.n + 31) / 32;
  const bool reverse = g_schedule == Schedule::Reverse;
  while (b.done < b.n && !b.error) {
    bool ran = false;
    for (unsigned w = 0; w < warps && !b.error; ++w) {
      const unsigned warp = reverse ? warps - 1 - w : w, lanes = warp_lanes(b, warp);
      for (bool again = true; again && !b.error;) {
        again = false;
        for (unsigned l = 0; l < lanes && !b.error; ++l) {
          const unsigned i = 32 * warp + (reverse ? lanes - 1 - l : l);
          if (b.fibers[i].state != State::Ready) continue;
          resume(b, i);
          ran = again = true;
        }
      }
    }
    if (!ran && b.done < b.n && !b.error) b.error = std::make_exception_ptr(KernelFault(stuck(b)));
  }
  // A fault leaves the other threads where they were; their stacks are
  // started afresh by the next block.
#ifdef MAESTRO_EMU_ASAN
  if (b.error)
    for (unsigned i = 0; i < b.n; ++i) __asan_unpoison_memory_region(g_stacks[i], kStackBytes);
#endif
}

}  // namespace

void set_schedule(Schedule s) { g_schedule = s; }
Counts counts() { return g_counts; }
void reset_counts() { g_counts = {}; }

void fault(const std::string& what) { throw KernelFault(g_block ? fmt::format("{}: {}", where(), what) : what); }

void block_barrier() {
  Block& b = block();
  Fiber& f = me();
  f.state = State::AtBlockBarrier;
  if (++b.block_waiting == b.n) {
    ++g_counts.block_barriers;
    b.block_waiting = 0;
    for (Fiber& o : b.fibers)
      if (o.state == State::AtBlockBarrier) o.state = State::Ready;
    return;
  }
  yield();
}

void warp_barrier(unsigned mask) {
  Block& b = block();
  if (mask != kFullMask) fault(fmt::format("a warp mask of {:#x}: only whole warps are emulated", mask));
  Fiber& f = me();
  const unsigned warp = b.current / 32, lanes = warp_lanes(b, warp);
  if (lanes != 32) fault("a warp op in a warp of fewer than 32 threads with a full mask");
  f.state = State::AtWarpBarrier;
  if (++b.warp_waiting[warp] == lanes) {
    ++g_counts.warp_barriers;
    b.warp_waiting[warp] = 0;
    for (unsigned i = 32 * warp; i < 32 * warp + lanes; ++i)
      if (b.fibers[i].state == State::AtWarpBarrier) b.fibers[i].state = State::Ready;
    return;
  }
  yield();
}

uint64_t warp_exchange(uint64_t mine, int src) {
  Block& b = block();
  const unsigned base = b.current / 32 * 32;
  b.exchange[b.current] = mine;
  warp_barrier(kFullMask);
  return b.exchange[base + unsigned(src)];
}

void warp_gather(const void* mine, size_t bytes, void* all) {
  if (bytes > kGatherBytes) fault(fmt::format("warp_gather of {} bytes a lane: at most {}", bytes, kGatherBytes));
  Block& b = block();
  Fiber& f = me();
  const unsigned base = b.current / 32 * 32, buffer = f.gathers++ % 2;
  std::memcpy(b.gather[buffer][b.current], mine, bytes);
  warp_barrier(kFullMask);
  for (unsigned l = 0; l < 32; ++l)
    std::memcpy(static_cast<unsigned char*>(all) + l * bytes, b.gather[buffer][base + l], bytes);
}

static void land(const Fiber::Copy& c) {
  if (c.src)
    std::memcpy(c.dst, c.src, 16);
  else
    std::memset(c.dst, 0, 16);
}

void async_copy16(void* dst, const void* src, bool valid) {
  if (!in_dynamic_shared(dst, 16) || reinterpret_cast<uintptr_t>(dst) % 16 != 0)
    fault("cp.async: a destination outside dynamic shared memory or not 16-byte aligned");
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) fault("cp.async: a source not 16-byte aligned");
  const Fiber::Copy c{static_cast<unsigned char*>(dst), valid ? static_cast<const unsigned char*>(src) : nullptr};
  if (g_schedule == Schedule::Reverse)
    land(c);  // as early as the hardware may: a tile copied over one still being read shows
  else
    me().open_copies.push_back(c);  // as late as it may: a tile read before its wait shows
}

void async_commit() {
  Fiber& f = me();
  f.copy_groups.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}

void async_wait(int pending) {
  Fiber& f = me();
  while (f.copy_groups.size() > size_t(pending)) {
    for (const Fiber::Copy& c : f.copy_groups.front()) land(c);
    f.copy_groups.pop_front();
  }
}

bool in_dynamic_shared(const void* p, size_t bytes) {
  const Block& b = block();
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= b.shared && c + bytes <= b.shared + b.shared_bytes;
}

int lane() { return int(block().current % 32); }

unsigned char* dynamic_shared() { return block().shared; }

bool set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || bytes > kMaxShared) return false;
  g_max_shared[kernel] = bytes;
  return true;
}

void run_grid(const void* kernel, const char* name, dim3 grid, dim3 block_dim, size_t shared_bytes,
              const std::function<void()>& thread) {
  const uint64_t threads = uint64_t(block_dim.x) * block_dim.y * block_dim.z;
  auto refuse = [&](cudaError_t e, const std::string& why) {
    g_last_error = e;
    g_last_message = fmt::format("launch of {}: {}", name, why);
  };
  if (threads == 0 || threads > kMaxThreads || block_dim.z > 64)
    return refuse(cudaErrorInvalidConfiguration,
                  fmt::format("block ({},{},{}): 1 to 1,024 threads", block_dim.x, block_dim.y, block_dim.z));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return refuse(cudaErrorInvalidConfiguration, fmt::format("grid ({},{},{})", grid.x, grid.y, grid.z));
  const auto it = g_max_shared.find(kernel);
  const int allowed = it == g_max_shared.end() ? kDefaultShared : std::max(kDefaultShared, it->second);
  if (shared_bytes > size_t(allowed))
    return refuse(cudaErrorInvalidValue, fmt::format("{} bytes of dynamic shared memory, {} allowed "
                                                     "(cudaFuncSetAttribute raises it to {})",
                                                     shared_bytes, allowed, kMaxShared));
  if (g_block) throw KernelFault(fmt::format("launch of {} from inside a kernel", name));
  while (g_stacks.size() < threads) {
    void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    g_stacks.push_back(static_cast<unsigned char*>(p));
  }
  const size_t shared_alloc = (shared_bytes + 255) / 256 * 256 + 256;
  std::unique_ptr<unsigned char, FreeDeleter> shared(
      static_cast<unsigned char*>(std::aligned_alloc(256, shared_alloc)));
  if (!shared) throw std::bad_alloc();
  auto b = std::make_unique<Block>();
  b->kernel = name;
  b->n = unsigned(threads);
  b->thread = &thread;
  b->shared = shared.get();
  b->shared_bytes = shared_bytes;
  b->fibers.resize(threads);
  blockDim = block_dim;
  gridDim = grid;
  ++g_counts.launches;
  g_block = b.get();
  struct Unset {
    ~Unset() { g_block = nullptr; }
  } unset;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(b->shared, 0xff, shared_alloc);  // NaN as fp32 and bf16: read before written
        b->bid = blockIdx = {x, y, z};
        ++g_counts.blocks;
        run_block(*b);
        if (b->error) std::rethrow_exception(b->error);
      }
}

}  // namespace emu

cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
      return emu::g_last_message.empty() ? "invalid argument" : emu::g_last_message.c_str();
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    default:
      return "unknown error";
  }
}
