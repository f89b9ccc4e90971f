// The partials of a context-parallel run gathered onto GPU 0 through NCCL (nccl_gather.h,
// attnscope/collective.h). One process drives every GPU: the communicators come from ncclCommInitAll,
// each GPU's sends and GPU 0's receives are posted in one group (NCCL matches a pair's point-to-point
// operations in the order they are posted, so rank r's O then LSE land in slot r).
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "attnscope/collective.h"
#include "device_check.h"
#include "device_result.h"
#include "nccl_gather.h"

namespace attnscope::cuda {

namespace {

void nccl_check(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) throw CudaError(what + ": " + ncclGetErrorString(r));
}

std::string version_text(int code) {  // NCCL_VERSION_CODE form: major * 10000 + minor * 100 + patch
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

// The communicators and streams over GPUs 0 .. n - 1, made once per process and count (ncclCommInitAll
// takes about a second) and never destroyed: their teardown at exit would race the CUDA runtime's own.
struct Comms {
  std::vector<ncclComm_t> comm;
  std::vector<cudaStream_t> stream;
};
std::mutex& comms_mutex() {  // held for a whole gather: a communicator serves one caller at a time
  static std::mutex m;
  return m;
}
Comms& comms_for(int n) {
  static std::map<int, std::unique_ptr<Comms>> all;
  auto& slot = all[n];
  if (slot) return *slot;
  // NVLink multicast (NVLS) is never needed by point-to-point sends, and a multicast object can take a
  // host's shared GPUs out of service: off unless the environment says otherwise
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  auto c = std::make_unique<Comms>();
  c->comm.resize(n);
  std::vector<int> devs(n);
  for (int g = 0; g < n; ++g) devs[g] = g;
  nccl_check(ncclCommInitAll(c->comm.data(), n, devs.data()), "ncclCommInitAll over " + std::to_string(n) + " GPUs");
  for (int g = 0; g < n; ++g) {
    ScopedDevice on(g);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    c->stream.push_back(s);
  }
  slot = std::move(c);
  return *slot;
}

// Two events on GPU 0, destroyed with the scope.
struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  EventPair() {
    check(cudaEventCreate(&a), "cudaEventCreate");
    if (cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
      cudaEventDestroy(a);
      check(e, "cudaEventCreate");
    }
  }
  ~EventPair() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

}  // namespace

double nccl_gather_to(const std::vector<RankBuffers>& ranks, const GpuPartials& into, int gpus) {
  if (into.device() != 0 || into.parts() != static_cast<int>(ranks.size()))
    throw CudaError("nccl_gather_to: the destination must be on GPU 0 with one slot per rank");
  for (const RankBuffers& r : ranks)
    if (r.device < 0 || r.device >= gpus) throw CudaError("nccl_gather_to: a rank on GPU " + std::to_string(r.device));
  std::lock_guard<std::mutex> lock(comms_mutex());
  Comms& c = comms_for(gpus);
  for (int g = 0; g < gpus; ++g) {  // every GPU idle: what made or staged the partials is not timed
    ScopedDevice on(g);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the gather");
  }
  ScopedDevice on0(0);
  const size_t n_o = static_cast<size_t>(into.rows()) * into.dv(), n_l = static_cast<size_t>(into.rows());
  EventPair ev;
  check(cudaEventRecord(ev.a, c.stream[0]), "cudaEventRecord");
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].device == 0) {  // already on GPU 0: a copy on its stream
      check(cudaMemcpyAsync(into.o(static_cast<int>(r)), ranks[r].o, n_o * 4, cudaMemcpyDeviceToDevice, c.stream[0]),
            "cudaMemcpyAsync (rank on GPU 0)");
      check(cudaMemcpyAsync(into.lse(static_cast<int>(r)), ranks[r].lse, n_l * 4, cudaMemcpyDeviceToDevice, c.stream[0]),
            "cudaMemcpyAsync (rank on GPU 0)");
    }
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t st = ncclSuccess;
  for (size_t r = 0; r < ranks.size() && st == ncclSuccess; ++r) {
    const int g = ranks[r].device;
    if (g == 0) continue;
    const int k = static_cast<int>(r);
    if ((st = ncclSend(ranks[r].o, n_o, ncclFloat, 0, c.comm[g], c.stream[g])) != ncclSuccess ||
        (st = ncclSend(ranks[r].lse, n_l, ncclFloat, 0, c.comm[g], c.stream[g])) != ncclSuccess ||
        (st = ncclRecv(into.o(k), n_o, ncclFloat, g, c.comm[0], c.stream[0])) != ncclSuccess ||
        (st = ncclRecv(into.lse(k), n_l, ncclFloat, g, c.comm[0], c.stream[0])) != ncclSuccess)
      break;
  }
  const ncclResult_t end = ncclGroupEnd();  // always closed, also after a failed post
  nccl_check(st, "ncclSend / ncclRecv");
  nccl_check(end, "ncclGroupEnd");
  check(cudaEventRecord(ev.b, c.stream[0]), "cudaEventRecord");
  for (int g = 0; g < gpus; ++g) {
    ScopedDevice on(g);
    check(cudaStreamSynchronize(c.stream[g]), "the gather's streams");
  }
  float ms = 0;
  check(cudaEventElapsedTime(&ms, ev.a, ev.b), "cudaEventElapsedTime");
  return ms;
}

std::string nccl_library_text() {
  int code = 0;
  const std::string loaded = ncclGetVersion(&code) == ncclSuccess ? version_text(code) : "unknown";
  std::string s = std::string(ATTNSCOPE_NCCL_FOUND_TEXT) + "; loaded " + loaded;
  if (loaded != version_text(NCCL_VERSION_CODE)) s += " (built with " + version_text(NCCL_VERSION_CODE) + ")";
  return s;
}

namespace {

// Host rows uploaded to one GPU, freed there.
struct Staged {
  int device;
  DeviceBuffer o, lse;
  Staged(int g, const float* ho, const float* hl, size_t n_o, size_t n_l) : device(g) {
    ScopedDevice on(g);
    o.alloc(n_o * 4);
    lse.alloc(n_l * 4);
    check(cudaMemcpy(o.as<float>(), ho, n_o * 4, cudaMemcpyHostToDevice), "cudaMemcpy (rank's O)");
    check(cudaMemcpy(lse.as<float>(), hl, n_l * 4, cudaMemcpyHostToDevice), "cudaMemcpy (rank's LSE)");
  }
  ~Staged() {
    try {
      ScopedDevice on(device);
      o.reset();
      lse.reset();
    } catch (const CudaError&) {
    }
  }
};

std::string gpus_text(int n) { return n == 2 ? "GPUs 0 and 1" : "GPUs 0-" + std::to_string(n - 1); }

// Each rank's buffers on its GPU: its device copy where usable, else its host rows uploaded to GPU r % n.
// The copies' mutexes are held (`locks`) so that none is dropped during the gather.
std::vector<RankBuffers> place(const std::vector<RankPartial>& ranks, int64_t rows, int dv, int n,
                               std::vector<std::unique_ptr<Staged>>* staged, std::vector<std::unique_lock<std::mutex>>* locks) {
  std::vector<RankBuffers> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (const auto* d = dynamic_cast<const DeviceResult*>(ranks[r].device.get())) {
      std::unique_lock<std::mutex> l(d->mutex());
      if (!d->dropped() && d->device() < n && d->o_elems() == rows * dv && d->lse_elems() == rows) {
        out.push_back({d->device(), d->o(), d->lse()});
        locks->push_back(std::move(l));
        continue;
      }
    }
    if (!ranks[r].o || !ranks[r].lse)
      throw CudaError("rank " + std::to_string(r) + " has neither a usable device copy on " + gpus_text(n) + " nor host rows");
    const int g = static_cast<int>(r % n);
    staged->push_back(
        std::make_unique<Staged>(g, ranks[r].o, ranks[r].lse, static_cast<size_t>(rows) * dv, static_cast<size_t>(rows)));
    out.push_back({g, staged->back()->o.as<float>(), staged->back()->lse.as<float>()});
  }
  return out;
}

}  // namespace

}  // namespace attnscope::cuda

namespace attnscope {

std::string gather_unavailable(int ranks) {
  if (std::string why = cuda::device_check(); !why.empty()) return why;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (n < 2) return "fewer than 2 GPUs (" + std::to_string(n) + " visible): the ranks run virtually on one";
  if (ranks < 2) return "a gather needs 2 or more ranks, not " + std::to_string(ranks);
  return "";
}

GatheredPartials gather_partials(const std::vector<RankPartial>& ranks, int64_t rows, int dv, bool keep_on_gpu0, int max_gpus) {
  GatheredPartials g;
  const int R = static_cast<int>(ranks.size());
  if (std::string why = gather_unavailable(R); !why.empty()) {
    g.status = status_of_reason(why);
    g.message = g.library = why;
    return g;
  }
  try {
    g.library = cuda::nccl_library_text();
    int n = 0;
    cuda::check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    n = std::min(n, R);
    if (max_gpus > 0) n = std::min(n, max_gpus);
    if (n < 2) throw cuda::CudaError("max_gpus " + std::to_string(max_gpus) + ": a gather needs 2 or more GPUs");
    std::vector<std::unique_ptr<cuda::Staged>> staged;
    std::vector<std::unique_lock<std::mutex>> locks;
    const std::vector<cuda::RankBuffers> bufs = cuda::place(ranks, rows, dv, n, &staged, &locks);
    auto into = std::make_shared<cuda::GpuPartials>(0, R, rows, dv);
    g.collective_ms = cuda::nccl_gather_to(bufs, *into, n);
    locks.clear();
    cuda::ScopedDevice on0(0);
    for (int r = 0; r < R; ++r) {
      g.o.emplace_back(static_cast<size_t>(rows) * dv);
      g.lse.emplace_back(static_cast<size_t>(rows));
      cuda::check(cudaMemcpy(g.o[r].data(), into->o(r), g.o[r].size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (gathered O)");
      cuda::check(cudaMemcpy(g.lse[r].data(), into->lse(r), g.lse[r].size() * 4, cudaMemcpyDeviceToHost),
                  "cudaMemcpy (gathered LSE)");
      g.rank_gpu.push_back(bufs[r].device);
    }
    g.gpus = n;
    int code = 0;
    ncclGetVersion(&code);
    g.message = "NCCL " + cuda::version_text(code) + ": " + std::to_string(R) + " ranks on " + cuda::gpus_text(n) +
                ", partials sent to GPU 0 (ncclSend / ncclRecv in one group)";
    if (keep_on_gpu0) g.on_gpu0 = std::move(into);
  } catch (const std::exception& e) {
    cudaGetLastError();
    const std::string lib = g.library;
    g = GatheredPartials{};
    g.status = Status::kError;
    g.message = e.what();
    g.library = lib;
  }
  return g;
}

}  // namespace attnscope
