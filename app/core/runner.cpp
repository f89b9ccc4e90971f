#include "runner.h"

#include <algorithm>
#include <cstdio>
#include <thread>

namespace attnscope {

Runner::Runner() : latest_(std::make_shared<Snapshot>()), worker_([this] { loop(); }) {}

Runner::~Runner() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cancel_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

uint64_t Runner::submit(const CaseFile& f, const SessionOptions& opt) {
  std::lock_guard<std::mutex> l(mu_);
  pending_ = std::make_pair(f, opt);
  cancel_ = true;  // the running job stops at its next check
  cv_.notify_all();
  return ++pending_gen_;
}

void Runner::retire(std::shared_ptr<const void> old) {
  if (!old) return;
  std::lock_guard<std::mutex> l(mu_);
  retired_.push_back(std::move(old));
  cv_.notify_all();
}

std::shared_ptr<const Snapshot> Runner::latest() const {
  std::lock_guard<std::mutex> l(mu_);
  return latest_;
}

std::string Runner::activity() const {
  std::lock_guard<std::mutex> l(mu_);
  return activity_;
}

void Runner::publish(std::shared_ptr<const Snapshot> s) {
  std::lock_guard<std::mutex> l(mu_);
  latest_ = std::move(s);
}

void Runner::loop() {
  for (;;) {
    std::pair<CaseFile, SessionOptions> job;
    uint64_t gen;
    {
      std::vector<std::shared_ptr<const void>> dead;
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || pending_.has_value() || !retired_.empty(); });
      dead.swap(retired_);
      if (stop_) return;
      if (!pending_) {
        l.unlock();
        dead.clear();  // freed here, not on the GUI thread
        continue;
      }
      job = std::move(*pending_);
      pending_.reset();
      gen = pending_gen_;
      cancel_ = false;
      busy_ = true;
    }
    auto snap = [gen](std::shared_ptr<const Session> s, bool done, std::string err) {
      auto n = std::make_shared<Snapshot>();
      n->generation = gen;
      n->session = std::move(s);
      n->done = done;
      n->error = std::move(err);
      return n;
    };
    SessionOptions opt = job.second;
    opt.cancel = &cancel_;
    // leave one hardware thread to the GUI so it keeps drawing at display rate
    if (opt.threads == 0) opt.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
    opt.progress = [this](const std::string& stage, double x) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s %d%%", stage.c_str(), static_cast<int>(100 * x));
      std::lock_guard<std::mutex> l(mu_);
      activity_ = buf;
    };
    try {
      auto s = begin_session(job.first, opt);
      publish(snap(std::make_shared<const Session>(*s), false, ""));  // the plan views draw at once
      run_session_backends(*s, opt, [&](const Session& cur) {
        if (!cancel_) publish(snap(std::make_shared<const Session>(cur), false, ""));
      });
      if (!cancel_) {
        finish_session(*s);
        publish(snap(std::make_shared<const Session>(*s), true, ""));
      }
    } catch (const std::exception& e) {
      publish(snap(nullptr, true, e.what()));
    }
    std::lock_guard<std::mutex> l(mu_);
    busy_ = false;
    activity_.clear();
  }
}

}  // namespace attnscope
