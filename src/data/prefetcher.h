// Prefetcher: makes the items of a sequence of steps ahead of use on its own
// threads, in step order, at most `depth` steps past the last one taken (a
// bounded queue). The data loader actor uses it to decode step k+1, k+2 ...
// while step k trains. get(k) blocks until step k is ready and rethrows what
// making it threw. Header-only; the producer must be thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace maestro {

template <class T>
class Prefetcher {
 public:
  // Makes one step's item on worker `thread` (0 .. threads-1; -1: on the
  // caller's thread, for a step behind the window).
  using Make = std::function<T(int64_t step, int thread)>;

  // Steps run up to last_step (exclusive); production starts at the first get().
  Prefetcher(Make make, int64_t last_step, int threads, int depth)
      : make_(std::move(make)), last_(last_step), depth_(depth) {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  T get(int64_t step) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!started_ || (step >= next_ && !busy_.count(step))) {  // first call, or a jump ahead
      started_ = true;
      next_ = step;
    }
    taken_ = step;
    cv_.notify_all();
    if (!ready_.count(step) && !busy_.count(step) && step < next_) {  // behind the window: make it here
      lock.unlock();
      return make_(step, -1);
    }
    cv_.wait(lock, [&] { return ready_.count(step) > 0; });
    Result r = std::move(ready_.at(step));
    ready_.erase(step);
    cv_.notify_all();
    if (r.error) std::rethrow_exception(r.error);
    return std::move(r.value);
  }

 private:
  struct Result {
    T value{};
    std::exception_ptr error;
  };

  void work(int thread) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || (started_ && next_ < last_ && next_ <= taken_ + depth_); });
      if (stop_) return;
      const int64_t step = next_++;
      busy_.insert(step);
      lock.unlock();
      Result r;
      try {
        r.value = make_(step, thread);
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
      busy_.erase(step);
      ready_.emplace(step, std::move(r));
      cv_.notify_all();
    }
  }

  Make make_;
  const int64_t last_;
  const int depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, started_ = false;
  int64_t next_ = 0, taken_ = 0;
  std::set<int64_t> busy_;
  std::map<int64_t, Result> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace maestro
