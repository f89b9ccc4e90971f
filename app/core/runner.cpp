#include "runner.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "attnscope/registry.h"

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

uint64_t Runner::submit(const CaseFile& f, const SessionOptions& opt, std::shared_ptr<const Session> planned) {
  std::lock_guard<std::mutex> l(mu_);
  pending_ = Job{f, opt, std::move(planned)};
  if (busy_ && !protected_) {  // the run in flight stops at its next check, unless it superseded one itself
    superseded_ = true;
    cancel_ = true;
  }
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
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    latest_ = std::move(s);
    wake = wake_;
  }
  if (wake) wake();  // the GUI draws the new snapshot now, not at its next timeout
}

void Runner::set_wake(std::function<void()> f) {
  std::lock_guard<std::mutex> l(mu_);
  wake_ = std::move(f);
}

void Runner::loop() {
  for (;;) {
    Job job;
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
      protected_ = superseded_.load();  // this run supersedes a cut-short one: the next edit lets it finish
      cancel_ = false;
      superseded_ = false;
      busy_ = true;
    }
    auto snap = [gen, this](std::shared_ptr<const Session> s, bool done, std::string err, bool sampled = false) {
      auto n = std::make_shared<Snapshot>();
      n->generation = gen;
      n->finished_gen = done && err.empty() ? gen : last_done_gen_;
      n->first_gen = (done && err.empty()) || sampled ? gen : last_first_gen_;
      n->sampled = sampled;
      n->session = std::move(s);
      n->done = done;
      n->error = std::move(err);
      return n;
    };
    LiveOptions lo;
    lo.session = job.opt;
    lo.session.cancel = &cancel_;
    // every core: the GUI thread sleeps between frames and draws in 1-3 ms
    if (lo.session.threads == 0) lo.session.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    lo.session.progress = [this](const std::string& stage, double x) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s %d%%", stage.c_str(), static_cast<int>(100 * x));
      std::lock_guard<std::mutex> l(mu_);
      activity_ = buf;
    };
    lo.cache = &cache_;
    lo.full_reference_budget = budget_;
    lo.superseded = &superseded_;
    // the newest finished results stand in (stale) until this run's replace them: the worker's last
    // finished session, else what the GUI showed when it planned
    lo.previous = last_done_ ? last_done_ : job.planned;
    if (job.planned) lo.plan = std::make_shared<const Plan>(job.planned->plan);
    lo.publish = [&](std::shared_ptr<const Session> s) { publish(snap(std::move(s), false, "")); };
    // the sampled results stand in for the next edit, and from here a newer edit supersedes the
    // background fill even where this run superseded another
    lo.sampled_done = [&](std::shared_ptr<const Session> s) {
      last_done_ = s;
      last_first_gen_ = gen;
      {
        std::lock_guard<std::mutex> l(mu_);
        protected_ = false;
        if (pending_) {
          superseded_ = true;
          cancel_ = true;
        }
      }
      publish(snap(std::move(s), false, "", true));
    };
    try {
      validate_case(job.file.spec, &registry_ids());
      auto done = run_live(job.file, lo);
      if (done) {
        last_done_ = done;
        last_done_gen_ = last_first_gen_ = gen;
        publish(snap(done, true, ""));
      }
    } catch (const std::exception& e) {
      publish(snap(nullptr, true, e.what()));
    }
    std::lock_guard<std::mutex> l(mu_);
    busy_ = false;
    protected_ = false;
    activity_.clear();
  }
}

}  // namespace attnscope
