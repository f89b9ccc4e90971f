// The Python worker's process and frames (worker_client.h). posix_spawn, not fork: the GUI calls this
// from its runner thread, and a forked copy of a threaded process may only exec.
#include "worker_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace attnscope::python {

extern const char* const kWorkerScript;  // worker_flex.py + worker_fa3.py + worker.py, embedded by CMake (worker_script.cpp)

namespace {

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string signal_text(int sig) {
  const char* name = sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGKILL ? "SIGKILL"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                                      : nullptr;
  return "signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
}

constexpr double kStartMs = 30000;           // the interpreter's start and NumPy's import, beside the call's timeout
constexpr size_t kShmMin = size_t{1} << 20;  // inputs from this size on go through shared memory

// A file in /dev/shm of `bytes`, mapped here; nullptr when it cannot be made (no /dev/shm, no room:
// posix_fallocate reserves the space first, so a full tmpfs fails here and not as a SIGBUS later).
void* make_shm(const std::string& path, size_t bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  void* m = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0
                ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  ::close(fd);
  if (m == MAP_FAILED) {
    ::unlink(path.c_str());
    return nullptr;
  }
  return m;
}

}  // namespace

std::string Worker::interpreter() {
  const char* p = std::getenv("ATTNSCOPE_PYTHON");
  return p && *p ? p : "python3";
}

Worker::~Worker() {
  kill_worker();
  drop_shm();
}

void Worker::drop_shm() {
  if (shm_) ::munmap(shm_, shm_bytes_);
  shm_ = nullptr;
  shm_bytes_ = 0;
  shm_pid_ = -1;
}

// Large inputs go through shared memory: a file in /dev/shm that this worker mapped read-only once and
// that is unlinked as soon as it has (both mappings keep it). Later calls copy their inputs into the same
// pages (already there: no page faults) and say "mapped"; a new worker or larger inputs make a new file.
// Returns the file to unlink after the call ("" when none); `header` gets "shm" and the offsets, unless
// the inputs are small or no file can be made, when the socket carries them.
std::string Worker::place_inputs(nlohmann::json& header, const std::vector<Buffer>& buffers) {
  static std::atomic<unsigned> seq{0};
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const auto& b : buffers) {
    offsets.push_back(total);
    total += (b.bytes + 63) / 64 * 64;
  }
  if (total < kShmMin) return "";
  std::string fresh;
  if (!shm_ || shm_pid_ != pid_ || total > shm_bytes_) {
    drop_shm();
    fresh = "/dev/shm/attnscope-" + std::to_string(::getpid()) + "-" + std::to_string(seq++);
    shm_ = make_shm(fresh, total);
    if (!shm_) return "";
    shm_bytes_ = total;
    shm_pid_ = pid_;
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].bytes) std::memcpy(static_cast<char*>(shm_) + offsets[i], buffers[i].data, buffers[i].bytes);
    header["buffers"][i]["offset"] = offsets[i];
  }
  header["shm"] = fresh.empty() ? "mapped" : fresh;
  return fresh;
}

void Worker::kill_worker() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    // the whole group: a child the user's module forked holds our stderr and would outlive the run
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

// Why the worker's end closed: its exit status, waited for briefly (it closes the socket as it dies).
std::string Worker::death_reason() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::string why = "the Python worker closed its end";
  for (int i = 0; i < 100 && pid_ > 0; ++i) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      why = WIFSIGNALED(st) ? "the Python worker died of " + signal_text(WTERMSIG(st))
                            : "the Python worker exited with code " + std::to_string(WEXITSTATUS(st));
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill_worker();
  return why;
}

void Worker::wait_io(short events, double deadline_ms, const std::atomic<bool>* cancel) {
  for (;;) {
    if (cancel && cancel->load()) {
      kill_worker();
      throw WorkerCancelled("cancelled (the Python worker was stopped)");
    }
    const double left = deadline_ms - now_ms();
    if (left <= 0) {
      kill_worker();
      throw WorkerFailure("timed out");
    }
    pollfd p{fd_, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left < 50 ? left + 1 : 50));
    if (n > 0) return;  // readable, writable, or hung up: the read / write says which
    if (n < 0 && errno != EINTR) {
      kill_worker();
      throw WorkerFailure(std::string("poll: ") + std::strerror(errno));
    }
  }
}

void Worker::send_frame(const nlohmann::json& header, const std::vector<Buffer>& buffers, double deadline_ms,
                        const std::atomic<bool>* cancel) {
  const std::string h = header.dump();
  std::string head = "ASPY";
  for (int i = 0; i < 4; ++i) head.push_back(static_cast<char>((h.size() >> (8 * i)) & 0xff));
  head += h;
  auto put = [&](const char* p, size_t n) {
    while (n) {
      wait_io(POLLOUT, deadline_ms, cancel);
      const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (k <= 0) throw WorkerFailure(death_reason() + " while it was sent the inputs");
      p += k;
      n -= static_cast<size_t>(k);
    }
  };
  put(head.data(), head.size());
  for (const auto& b : buffers) put(static_cast<const char*>(b.data), b.bytes);
}

Reply Worker::read_frame(double deadline_ms, const std::atomic<bool>* cancel) {
  auto get = [&](char* p, size_t n) {
    while (n) {
      wait_io(POLLIN, deadline_ms, cancel);
      const ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (k <= 0) throw WorkerFailure(death_reason());
      p += k;
      n -= static_cast<size_t>(k);
    }
  };
  char head[8];
  get(head, 8);
  if (std::memcmp(head, "ASPY", 4) != 0) {
    kill_worker();
    throw WorkerFailure("the Python worker broke the protocol (a frame without its ASPY mark)");
  }
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(static_cast<unsigned char>(head[4 + i])) << (8 * i);
  std::string text(len, '\0');
  get(text.data(), len);
  Reply r;
  try {
    r.header = nlohmann::json::parse(text);
    for (const auto& d : r.header.value("buffers", nlohmann::json::array())) {
      size_t n = 4;  // f32 and i32 alike
      for (const auto& x : d.at("shape")) n *= x.get<size_t>();
      r.buffers.emplace_back(n);
      get(r.buffers.back().data(), n);
    }
  } catch (const nlohmann::json::exception& e) {
    kill_worker();
    throw WorkerFailure(std::string("the Python worker broke the protocol: ") + e.what());
  }
  return r;
}

void Worker::start(double deadline_ms, const std::atomic<bool>* cancel) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw WorkerFailure(std::string("socketpair: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);  // dup2 clears close-on-exec on the copies
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  const std::string py = interpreter();
  std::string script = kWorkerScript;
  char* argv[] = {const_cast<char*>(py.c_str()), const_cast<char*>("-u"), const_cast<char*>("-c"), script.data(), nullptr};
  // its own process group (pgid = its pid), so that kill_worker ends whatever the module forked
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, py.c_str(), &fa, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    throw WorkerFailure("cannot start " + py + ": " + std::strerror(rc) + " (set ATTNSCOPE_PYTHON to the interpreter)");
  }
  pid_ = pid;
  fd_ = sv[0];
  Reply hello = read_frame(deadline_ms, cancel);
  if (hello.header.value("status", "") != "ok") {
    const std::string why = hello.header.value("message", "the Python worker did not start");
    kill_worker();
    throw WorkerFailure(why);
  }
}

Reply Worker::call(nlohmann::json header, const std::vector<Buffer>& buffers, double timeout_s, const std::atomic<bool>* cancel) {
  what_ = header.value("function", "?") + " in " + header.value("file", "?");
  nlohmann::json list = nlohmann::json::array();
  for (const auto& b : buffers) list.push_back({{"name", b.name}, {"dtype", b.dtype}, {"shape", b.shape}});
  header["buffers"] = list;
  const double t0 = now_ms();
  if (pid_ < 0) {
    try {
      start(t0 + kStartMs, cancel);
    } catch (const WorkerFailure& e) {
      const std::string w = e.what();
      throw WorkerFailure(w == "timed out" ? "the Python worker did not start within " + std::to_string(kStartMs / 1000) + " s"
                                           : w);
    }
  }
  const double t1 = now_ms();  // the hand-off from here: the inputs' copy into shared memory included
  struct Unlink {
    std::string path;
    ~Unlink() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } fresh{place_inputs(header, buffers)};
  const bool by_shm = header.contains("shm");
  const double deadline = t1 + timeout_s * 1000.0 * header.value("reps", 1);
  try {
    send_frame(header, by_shm ? std::vector<Buffer>{} : buffers, deadline, cancel);
    Reply r = read_frame(deadline, cancel);
    r.round_trip_ms = now_ms() - t1;
    return r;
  } catch (const WorkerFailure& e) {
    const std::string w = e.what();
    if (w == "timed out") {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", timeout_s);
      throw WorkerFailure(std::string("timed out: the call of ") + what_ + " ran past " + buf +
                          " s (--python-timeout); the worker was killed, a new one starts for the next call");
    }
    throw WorkerFailure(w + " during the call of " + what_ + "; a new worker starts for the next call");
  }
}

Worker& shared_worker() {
  static Worker w;
  return w;
}

std::mutex& shared_worker_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace attnscope::python
