// LocalTransport: a size-classed free list of fp32 buffers behind
// reference-counted TensorRefs.
#include "transport/local_transport.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace maestro {

struct LocalTransport::Pool {
  std::mutex mu;
  std::map<size_t, std::vector<std::unique_ptr<Buffer>>> free_by_capacity;
  PoolStats stats;

  void release(Buffer* b) {
    std::unique_ptr<Buffer> owned(b);
    std::lock_guard lock(mu);
    stats.live--;
    stats.pooled++;
    free_by_capacity[owned->data.size()].push_back(std::move(owned));
  }
};

LocalTransport::LocalTransport() : pool_(std::make_shared<Pool>()) {}
LocalTransport::~LocalTransport() = default;

static size_t capacity_for(int64_t n) {
  size_t c = 64;
  while (c < static_cast<size_t>(n)) c <<= 1;
  return c;
}

TensorRef LocalTransport::allocate(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("LocalTransport::allocate: negative dimension");
    n *= d;
  }
  const size_t cap = capacity_for(n);
  std::unique_ptr<Buffer> b;
  {
    std::lock_guard lock(pool_->mu);
    auto it = pool_->free_by_capacity.find(cap);
    if (it != pool_->free_by_capacity.end() && !it->second.empty()) {
      b = std::move(it->second.back());
      it->second.pop_back();
      pool_->stats.reuses++;
      pool_->stats.pooled--;
    } else {
      pool_->stats.allocations++;
    }
    pool_->stats.live++;
  }
  if (b) {
    std::fill(b->data.begin(), b->data.begin() + n, 0.0f);
  } else {
    b = std::make_unique<Buffer>();
    b->data.assign(cap, 0.0f);
  }
  std::shared_ptr<Pool> pool = pool_;
  TensorRef ref;
  ref.buffer = std::shared_ptr<Buffer>(b.release(), [pool](Buffer* p) { pool->release(p); });
  ref.shape = std::move(shape);
  return ref;
}

TensorRef LocalTransport::copy_of(std::vector<int64_t> shape, const float* values) {
  TensorRef ref = allocate(std::move(shape));
  if (ref.numel() > 0) std::memcpy(ref.buffer->data.data(), values, sizeof(float) * ref.numel());
  return ref;
}

PoolStats LocalTransport::stats() const {
  std::lock_guard lock(pool_->mu);
  return pool_->stats;
}

}  // namespace maestro
