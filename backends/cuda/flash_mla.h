// cuda.flash's MLA absorbed decode (flash_mla_kernel.cuh): the kernel's shape, its launcher table and
// the host side that flash.cu hands an absorbed /mla case to (flash_mla.cu).
#pragma once

#include <string>

#include "attnscope/backend.h"
#include "flash_params.h"

namespace attnscope::cuda {

// The one MLA shape the kernel is built for (DeepSeek-V3 / Kimi-K2: kv_lora_rank 512, rope_dim 64):
// qk over [ckv ; kpe], vo over ckv.
constexpr int kMlaRank = 512, kMlaRope = 64;
constexpr int kMlaQkDim = kMlaRank + kMlaRope, kMlaVoDim = kMlaRank;

// 16-row groups of a CTA of `rows` rows (16, 32 or 64: one or more of the plan's items, flash_mla.cu);
// a CTA has 2 warps per group (each owning half of the 512 output dims).
constexpr int flash_mla_row_groups(int rows) { return rows <= 16 ? 1 : rows <= 32 ? 2 : 4; }
// Dynamic shared memory: Q [16 rg][576], two K stages [64][576], P [16 rg][64], all in the dtype.
constexpr size_t flash_mla_smem_bytes(int rg) {
  return static_cast<size_t>(rg * 16 * kMlaQkDim + 2 * kKvTile * kMlaQkDim + rg * 16 * kKvTile) * 2;
}

// The Hopper kernel's (flash_mla_sm90_kernel.cuh): Q and two K stages (9 panels of 64 rows each), and the
// slack that aligns them to the 1024-byte swizzle atom; P lives in a stage.
constexpr size_t flash_mla_sm90_smem_bytes() { return 3 * static_cast<size_t>(kKvTile) * kMlaQkDim * 2 + 1024; }

// The launcher of a dtype (instances/flash_mla_instances.def; rows: the CTA's), nullptr when not built.
using FlashMlaLauncher = void (*)(const FlashParams&, int rows, dim3 grid, cudaStream_t);
FlashMlaLauncher find_flash_mla_launcher(DType dt);
// The Hopper kernel's launcher of a dtype (instances/flash_mla_sm90_instances.def: CTAs of 64 rows, 256
// threads), nullptr when not built.
using FlashMlaSm90Launcher = void (*)(const FlashParams&, dim3 grid, cudaStream_t);
FlashMlaSm90Launcher find_flash_mla_sm90_launcher(DType dt);

// Why cuda.flash does not run this absorbed MLA case ("" = it does); the non-absorbed form is refused
// by the descriptor (family.cpp).
std::string flash_mla_check(const CaseSpec& c);
// Runs an absorbed MLA case: the split plan's items, then the merge (heavy_first: flash.cu's launch order;
// hopper: the device is sm_90 and the wgmma kernel is allowed, used where it was built).
Result run_flash_mla(const CaseSpec& c, const Plan& p, const RunOptions& opt, bool heavy_first, bool hopper);

}  // namespace attnscope::cuda
