// ThreadPool (thread_pool.h).
#include "cpu/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace maestro {

ThreadPool::ThreadPool(int threads) {
  try {
    for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // Out of threads (ulimit -u, pid_max): stop the ones started, say so.
    const size_t started = workers_.size();
    stop_workers();
    throw std::runtime_error(fmt::format("cannot start worker thread {} of {}: {}", started + 1, threads - 1,
                                         e.code().message()));
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

// Takes chunks until none is left; called by the workers and the caller.
void ThreadPool::run_chunks() {
  std::unique_lock lock(mutex_);
  while (next_chunk_ < chunks_) {
    const int64_t k = next_chunk_++;
    const auto* job = job_;
    lock.unlock();
    (*job)(k * grain_, std::min(n_, (k + 1) * grain_));
    lock.lock();
    if (++finished_chunks_ == chunks_) done_.notify_all();
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    run_chunks();
    lock.lock();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  std::lock_guard call(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    n_ = n;
    grain_ = grain;
    chunks_ = (n + grain - 1) / grain;
    next_chunk_ = finished_chunks_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return finished_chunks_ == chunks_; });
  job_ = nullptr;
}

}  // namespace maestro
