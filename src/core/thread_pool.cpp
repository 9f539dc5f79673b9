// ThreadPool implementation: static block partition of the index range per participant.
#include "core/thread_pool.h"

#include <cstdlib>

namespace tq {

ThreadPool::ThreadPool(int n_thread) {
  for (int i = 1; i < n_thread; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_share(int worker) {
  int parts = size();
  int begin = int(long(job_n_) * worker / parts);
  int end = int(long(job_n_) * (worker + 1) / parts);
  for (int i = begin; i < end; ++i) (*job_)(i);
}

void ThreadPool::worker_loop(int index) {
  long seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_share(index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_ = int(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  run_share(0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("TQ_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw ? int(hw) : 1;
  }());
  return pool;
}

}  // namespace tq
