// ThreadPool: a fixed set of workers for the CPU backend's non-GEMM kernels.
// parallel_for splits [0, n) into chunks of a fixed `grain` (not one chunk
// per thread), so which elements a chunk holds never depends on the thread
// count: a kernel that computes each element within one chunk, and reduces
// chunk partials in chunk order, gives bitwise-identical results with any
// number of threads. Calls from several threads at once are serialised.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace maestro {

class ThreadPool {
 public:
  // threads >= 1 (the caller counts as one). Throws std::runtime_error when
  // a worker cannot be started (none is left running).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }
  // fn(begin, end) over chunks [k*grain, min(n, (k+1)*grain)).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void work();
  void stop_workers();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0, next_chunk_ = 0, finished_chunks_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace maestro
