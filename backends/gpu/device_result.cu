// Device copies of results (device_result.h) and the process-wide budget that bounds them.
#include <algorithm>
#include <list>

#include "attnscope/device_compare.h"
#include "device_result.h"

namespace attnscope::cuda {

namespace {

struct Budget {
  std::mutex m;
  int64_t limit = int64_t{1} << 30;
  std::list<std::weak_ptr<const DeviceResult>> copies;  // oldest first
};
Budget& budget() {
  static Budget b;
  return b;
}

// Bytes the live, undropped copies hold; forgets the copies whose results are gone. Under b.m.
int64_t held(Budget& b) {
  int64_t n = 0;
  for (auto it = b.copies.begin(); it != b.copies.end();) {
    auto p = it->lock();
    if (!p || p->dropped()) {
      it = b.copies.erase(it);
      continue;
    }
    n += p->bytes();
    ++it;
  }
  return n;
}

// Drops the oldest copies until `need` more bytes fit the limit. Under b.m.
void make_room(Budget& b, int64_t need) {
  while (!b.copies.empty() && held(b) + need > b.limit) {
    if (auto p = b.copies.front().lock()) p->drop();
    b.copies.pop_front();
  }
}

// The stored O rows as float, as download_as_float converts them, the padding columns dropped.
__global__ void o_to_float_kernel(const void* src, int t, int64_t rows, int d_stored, int dv, float* dst) {
  const int64_t n = rows * dv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = (i / dv) * d_stored + i % dv;
    const DType dt = static_cast<DType>(t);
    dst[i] = dt == DType::kFp32   ? static_cast<const float*>(src)[s]
             : dt == DType::kFp16 ? f16_bits_to_f32(static_cast<const uint16_t*>(src)[s])
                                  : bf16_bits_to_f32(static_cast<const uint16_t*>(src)[s]);
  }
}

}  // namespace

DeviceResult::DeviceResult(int device, int64_t o_elems, int64_t lse_elems)
    : device_(device), o_elems_(o_elems), lse_elems_(lse_elems) {
  o_.alloc(o_elems * 4);
  lse_.alloc(lse_elems * 4);
}

void DeviceResult::drop() const {
  std::lock_guard<std::mutex> l(m_);
  o_.reset();
  lse_.reset();
  dropped_ = true;
}

namespace {

// r's copy made by fill (on the current device) where the budget holds it; nothing where it cannot be
// made: the result then stays on the host alone and is compared there.
template <class Fill>
void attach(Result* r, const RunOptions& opt, Fill&& fill) {
  const int64_t no = static_cast<int64_t>(r->o.size()), nl = static_cast<int64_t>(r->lse.size());
  if (!opt.keep_device_copy || no == 0) return;
  Budget& b = budget();
  std::lock_guard<std::mutex> l(b.m);
  if ((no + nl) * 4 > b.limit) return;
  make_room(b, (no + nl) * 4);
  try {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    auto copy = std::make_shared<DeviceResult>(dev, no, nl);
    fill(*copy);
    if (nl) check(cudaMemcpy(copy->lse(), r->lse.data(), nl * 4, cudaMemcpyHostToDevice), "cudaMemcpy (LSE copy)");
    b.copies.push_back(copy);
    r->device = std::move(copy);
  } catch (const CudaError&) {
    cudaGetLastError();
  }
}

}  // namespace

void attach_device_copy(Result* r, const DeviceBuffer& o, DType t, int64_t rows, int d_stored, int dv, const RunOptions& opt) {
  if (static_cast<int64_t>(r->o.size()) != rows * dv || o.bytes() < static_cast<size_t>(rows * d_stored * dtype_bytes(t))) return;
  attach(r, opt, [&](const DeviceResult& copy) {
    const int64_t n = rows * dv;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535 * 4)));
    o_to_float_kernel<<<grid, 256>>>(o.as<void>(), static_cast<int>(t), rows, d_stored, dv, copy.o());
    check_launch("o_to_float_kernel", grid, dim3(256), 0);
  });
}

void attach_host_copy(Result* r, const RunOptions& opt) {
  attach(r, opt, [&](const DeviceResult& copy) {
    check(cudaMemcpy(copy.o(), r->o.data(), r->o.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy (O copy)");
  });
}

std::shared_ptr<const DeviceResult> upload_device_copy(const Result& r) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  auto copy = std::make_shared<DeviceResult>(dev, static_cast<int64_t>(r.o.size()), static_cast<int64_t>(r.lse.size()));
  if (!r.o.empty()) check(cudaMemcpy(copy->o(), r.o.data(), r.o.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy (O copy)");
  if (!r.lse.empty())
    check(cudaMemcpy(copy->lse(), r.lse.data(), r.lse.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy (LSE copy)");
  return copy;
}

bool drop_device_copies() {
  Budget& b = budget();
  std::lock_guard<std::mutex> l(b.m);
  bool any = false;
  for (auto& w : b.copies)
    if (auto p = w.lock()) {
      any |= !p->dropped();
      p->drop();
    }
  b.copies.clear();
  return any;
}

}  // namespace attnscope::cuda

namespace attnscope {

void set_device_copy_budget(int64_t bytes) {
  auto& b = cuda::budget();
  std::lock_guard<std::mutex> l(b.m);
  b.limit = std::max<int64_t>(bytes, 0);
  cuda::make_room(b, 0);
}

int64_t device_copy_budget() {
  std::lock_guard<std::mutex> l(cuda::budget().m);
  return cuda::budget().limit;
}

int64_t device_copy_bytes() {
  std::lock_guard<std::mutex> l(cuda::budget().m);
  return cuda::held(cuda::budget());
}

}  // namespace attnscope
