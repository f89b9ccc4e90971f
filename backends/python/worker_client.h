// The persistent Python worker the python: backends call (docs/python-backends.md, "Protocol"): one
// process for the whole run, started on first use, killed and started again after it dies, hangs past
// the timeout or breaks the protocol. It runs in a process group of its own, killed whole with it (at
// exit too), so a child that user code forks does not outlive the run. Inputs go over a Unix socket pair as JSON headers and raw
// little-endian buffers (worker.py), or, on the GPU path, CUDA IPC handles of attnscope's device
// buffers in the header (gpu_handoff.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnscope::python {

// One buffer of a frame: bytes of a little-endian array, its name, dtype ("f32" / "i32") and shape.
struct Buffer {
  std::string name, dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

struct Reply {
  nlohmann::json header;
  std::vector<std::vector<char>> buffers;  // in the header's "buffers" order
  double round_trip_ms = 0;                // request sent to reply read, on attnscope's side
};

// The worker failed (died, timed out, broke the protocol, could not start): the call's status. It has
// been killed; the next call starts a new one.
struct WorkerFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The caller cancelled (the GUI's new case); the worker was killed.
struct WorkerCancelled : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Worker {
 public:
  ~Worker();
  // Sends one request and returns the worker's reply within timeout_s (starting the worker first if
  // none runs; its start counts in the time). Throws WorkerFailure or WorkerCancelled.
  Reply call(nlohmann::json header, const std::vector<Buffer>& buffers, double timeout_s, const std::atomic<bool>* cancel);
  // The interpreter: ATTNSCOPE_PYTHON, else python3 from PATH.
  static std::string interpreter();
  // pid of the running worker, -1 when none (tests check the restart).
  pid_t pid() const { return pid_; }

 private:
  void start(double deadline_ms, const std::atomic<bool>* cancel);
  void kill_worker();
  void send_frame(const nlohmann::json& header, const std::vector<Buffer>& buffers, double deadline_ms,
                  const std::atomic<bool>* cancel);
  Reply read_frame(double deadline_ms, const std::atomic<bool>* cancel);
  void wait_io(short events, double deadline_ms, const std::atomic<bool>* cancel);
  std::string death_reason();
  std::string place_inputs(nlohmann::json& header, const std::vector<Buffer>& buffers);
  void drop_shm();
  pid_t pid_ = -1;
  void* shm_ = nullptr;  // the inputs' shared memory, mapped by worker shm_pid_ too
  size_t shm_bytes_ = 0;
  pid_t shm_pid_ = -1;
  int fd_ = -1;
  std::string what_;  // "the call of FUNCTION in FILE", for the messages
};

// The process's worker and the lock a caller holds for its whole call (one call at a time).
Worker& shared_worker();
std::mutex& shared_worker_mutex();

}  // namespace attnscope::python
