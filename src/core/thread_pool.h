// ThreadPool: a fixed set of workers for data-parallel loops (parallel_for over an index range).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tq {

class ThreadPool {
 public:
  explicit ThreadPool(int n_thread);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(i) for i in [0, n), split across the workers and the calling thread; returns when
  // all calls are done. Concurrent callers are serialised; fn must not call parallel_for.
  void parallel_for(int n, const std::function<void(int)>& fn);

  // The process-wide pool, sized to the hardware threads (TQ_THREADS overrides).
  static ThreadPool& global();

 private:
  void worker_loop(int index);
  void run_share(int worker);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int)>* job_ = nullptr;
  int job_n_ = 0;
  long generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace tq
