// MLA's inputs on the device (device_mla.cu).
#pragma once

#include "device_gen.cuh"
#include "device_workload.h"

namespace attnscope::cuda {

// Fills w.q, w.k and w.v (allocated, sizes set) of an MLA case from the generator parameters `p`.
void generate_mla(const CaseSpec& c, const gen::GenParams& p, DeviceWorkload& w);

}  // namespace attnscope::cuda
