// LocalTransport (see local_transport.h): pools of host memory, blocks of
// power-of-two capacity with free lists, a process-wide table of
// transports for puts.
#include "transport/local_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>

namespace maestro {

namespace {

constexpr size_t kMinBlock = 256;             // bytes
constexpr size_t kDefaultRegion = 16u << 20;  // bytes per region of the default pool
constexpr size_t kAlign = 64;

size_t capacity_for(size_t bytes) {
  size_t c = kMinBlock;
  while (c < bytes) c <<= 1;
  return c;
}

}  // namespace

struct LocalTransport::State {
  struct Block {
    size_t capacity = 0;
    bool live = false;
  };
  // One registered region of memory. The default pool is every region with
  // `pool == kDefaultPool`; a registered pool is one region.
  struct Region {
    uint64_t pool = 0;
    std::byte* base = nullptr;
    size_t size = 0, used = 0;  // used: the carved prefix
    bool pinned = false;        // by `pinning`
    std::map<uint64_t, Block> blocks;  // offset -> block
  };

  uint64_t id = 0;
  mutable std::mutex mu;
  std::map<uint64_t, Region> regions;  // region id -> region (a registered pool's id is its region's)
  uint64_t next_region = 1;
  // (pool, capacity) -> free blocks (region id, offset)
  std::map<std::pair<uint64_t, size_t>, std::vector<std::pair<uint64_t, uint64_t>>> free;
  TransportStats stats;
  LocalTransport::RegionMemory memory;
  HostPinning pinning;  // none until pin_host_memory()

  ~State() {
    for (auto& [rid, r] : regions) {
      if (r.pinned) pinning.unpin(r.base);
      memory.release(rid, r.base, r.size);
    }
  }

  // Pins a region once, where pinning is set. Caller holds mu.
  void pin(Region& r) {
    if (r.pinned || !pinning.pin || !pinning.pin(r.base, r.size)) return;
    r.pinned = true;
    stats.pinned_bytes += int64_t(r.size);
  }

  uint64_t add_region(uint64_t pool, size_t size) {
    size = std::max(kAlign, (size + kAlign - 1) / kAlign * kAlign);
    const uint64_t rid = next_region++;
    std::byte* base = memory.allocate(rid, size);
    Region& r = regions[rid];
    r.pool = pool == kDefaultPool ? kDefaultPool : rid;
    r.base = base;
    r.size = size;
    stats.pools++;
    stats.pool_bytes += int64_t(size);
    pin(r);
    return rid;
  }

  // A block of `capacity` bytes in `pool`: from the free list, else carved.
  std::pair<uint64_t, uint64_t> take(uint64_t pool, size_t capacity) {
    auto& list = free[{pool, capacity}];
    if (!list.empty()) {
      auto b = list.back();
      list.pop_back();
      stats.reuses++;
      stats.pooled--;
      return b;
    }
    for (auto& [rid, r] : regions)
      if (r.pool == pool && r.size - r.used >= capacity) return carve(rid, r, capacity);
    if (pool != kDefaultPool)
      throw std::runtime_error(fmt::format("local transport: pool {} is full ({} bytes wanted)", pool, capacity));
    const uint64_t rid = add_region(kDefaultPool, std::max(kDefaultRegion, capacity));
    return carve(rid, regions[rid], capacity);
  }

  std::pair<uint64_t, uint64_t> carve(uint64_t rid, Region& r, size_t capacity) {
    const uint64_t offset = r.used;
    r.used += capacity;
    r.blocks[offset] = {capacity, false};
    stats.allocations++;
    return {rid, offset};
  }

  // Copies `dst.bytes` bytes from src into the block dst names, or says why
  // not (then nothing is written). Caller holds mu.
  std::string write(const TensorDescriptor& dst, const std::byte* src) {
    // A descriptor names the block's region (for the default pool too).
    auto r = regions.find(dst.pool);
    if (r == regions.end()) return "no such pool";
    auto b = r->second.blocks.upper_bound(dst.offset);
    if (b == r->second.blocks.begin()) return "no block at that offset";
    --b;
    if (!b->second.live) return "the block is not allocated (released, or never handed out)";
    const uint64_t room = b->first + b->second.capacity - dst.offset;  // > 0: offset is inside the block
    if (dst.offset >= b->first + b->second.capacity || dst.bytes > room)
      return fmt::format("bytes [{}, {}) leave the block [{}, {})", dst.offset, dst.offset + dst.bytes, b->first,
                         b->first + b->second.capacity);
    if (dst.bytes > 0) std::memcpy(r->second.base + dst.offset, src, dst.bytes);
    return {};
  }

  void give_back(uint64_t rid, uint64_t offset) {
    std::lock_guard lock(mu);
    Region& r = regions.at(rid);
    Block& b = r.blocks.at(offset);
    b.live = false;
    stats.live--;
    stats.pooled++;
    free[{r.pool, b.capacity}].push_back({rid, offset});
  }
};

namespace {

// Every LocalTransport of the process, by id: where a put finds its target.
struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<LocalTransport::State>> by_id;
  std::atomic<uint64_t> next{1};
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

LocalTransport::LocalTransport()
    : LocalTransport(RegionMemory{[](uint64_t, size_t bytes) {
                                    auto* base = static_cast<std::byte*>(std::aligned_alloc(kAlign, bytes));
                                    if (!base) throw std::bad_alloc();
                                    return base;
                                  },
                                  [](uint64_t, std::byte* base, size_t) { std::free(base); }}) {}

LocalTransport::LocalTransport(RegionMemory memory) : state_(std::make_shared<State>()) {
  state_->memory = std::move(memory);
  Registry& reg = registry();
  state_->id = reg.next++;
  std::lock_guard lock(reg.mu);
  reg.by_id[state_->id] = state_;
}

LocalTransport::~LocalTransport() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  reg.by_id.erase(state_->id);
}

uint64_t LocalTransport::id() const { return state_->id; }

void LocalTransport::pin_host_memory(HostPinning pinning) {
  if (!pinning.pin || !pinning.unpin) throw std::invalid_argument("local transport: host pinning without pin or unpin");
  std::lock_guard lock(state_->mu);
  if (state_->pinning.pin) throw std::logic_error("local transport: host pinning set twice");
  state_->pinning = std::move(pinning);
  for (auto& [rid, r] : state_->regions) state_->pin(r);
}

uint64_t LocalTransport::register_pool(size_t bytes, Device device) {
  if (device != Device::Host)
    throw std::invalid_argument(fmt::format("local transport: cannot register {} memory", device_name(device)));
  if (bytes == 0) throw std::invalid_argument("local transport: a pool of 0 bytes");
  std::lock_guard lock(state_->mu);
  return state_->add_region(kDefaultPool + 1, bytes);  // any non-default value: the region becomes its own pool
}

TensorRef LocalTransport::allocate(std::vector<int64_t> shape, DType dtype, uint64_t pool) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("LocalTransport::allocate: negative dimension");
    n *= d;
  }
  const size_t bytes = size_t(n) * dtype_size(dtype), capacity = capacity_for(bytes);
  std::pair<uint64_t, uint64_t> at;
  std::byte* data = nullptr;
  {
    std::lock_guard lock(state_->mu);
    if (pool != kDefaultPool) {
      auto it = state_->regions.find(pool);
      if (it == state_->regions.end() || it->second.pool != pool)
        throw std::invalid_argument(fmt::format("local transport: no pool {}", pool));
    }
    at = state_->take(pool, capacity);
    State::Region& r = state_->regions.at(at.first);
    r.blocks.at(at.second).live = true;
    state_->stats.live++;
    data = r.base + at.second;
  }
  std::memset(data, 0, bytes);
  std::shared_ptr<State> state = state_;
  const auto [rid, offset] = at;
  TensorRef ref;
  ref.buffer = std::shared_ptr<Buffer>(new Buffer{data, capacity, state_->id, rid, offset, Device::Host, {}, nullptr},
                                       [state, rid = rid, offset = offset](Buffer* b) {  // clang 14: no capture of a binding
                                         state->give_back(rid, offset);
                                         delete b;
                                       });
  ref.shape = std::move(shape);
  ref.dtype = dtype;
  return ref;
}

TensorDescriptor LocalTransport::describe(const TensorRef& t) const {
  if (t.empty() || t.buffer->owner != state_->id)
    throw std::invalid_argument("local transport: describe() of a tensor it did not allocate");
  return {state_->id, t.buffer->pool, t.buffer->offset, t.bytes(), t.dtype, t.device(), t.buffer->offset,
          t.buffer->capacity};
}

void LocalTransport::put(const TensorRef& src, const TensorDescriptor& dst, PutCompletion done) {
  std::shared_ptr<State> target;
  {
    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    auto it = reg.by_id.find(dst.owner);
    if (it != reg.by_id.end()) target = it->second.lock();
  }
  auto refuse = [&](const std::string& why) {
    {
      std::lock_guard lock(state_->mu);
      state_->stats.refused++;
    }
    done(fmt::format("put of {} bytes into (owner {}, pool {}, offset {}) refused: {}", src.bytes(), dst.owner,
                     dst.pool, dst.offset, why));
  };
  if (!target) return refuse("no such transport in this process");
  if (src.dtype != dst.dtype)
    return refuse(fmt::format("the source is {}, the target {}", dtype_name(src.dtype), dtype_name(dst.dtype)));
  if (src.bytes() != dst.bytes)
    return refuse(fmt::format("the source has {} bytes, the target {}", src.bytes(), dst.bytes));
  if (dst.device != Device::Host || src.device() != Device::Host) return refuse("device memory");
  // Checked and written under the target's lock: the block cannot be
  // released and handed out again in between.
  std::string why;
  {
    std::lock_guard lock(target->mu);
    why = target->write(dst, src.empty() ? nullptr : src.buffer->data);
  }
  if (!why.empty()) return refuse(why);
  {
    std::lock_guard lock(state_->mu);
    state_->stats.puts++;
    state_->stats.bytes_put += int64_t(dst.bytes);
  }
  done("");
}

TransportStats LocalTransport::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

TensorRef Transport::copy_of(std::vector<int64_t> shape, const float* values) {
  TensorRef ref = allocate(std::move(shape));
  if (ref.numel() > 0) std::memcpy(ref.buffer->data, values, ref.bytes());
  return ref;
}

}  // namespace maestro
