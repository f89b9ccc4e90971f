// cuda.flash on MLA's absorbed form (flash_mla_kernel.cuh): the checks, the launch of the split plan's
// items on the MLA kernel, then the merge kernel flash.cu runs for every split plan.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "attnscope/softmax_state.h"
#include "cuda_util.h"
#include "device_workload.h"
#include "flash_mla.h"
#include "flash_run.h"

namespace attnscope::cuda {

#define FLASH_MLA_INSTANCE(D, N, T) void launch_flash_mla_d##D##_##N(const FlashParams&, int, dim3, cudaStream_t);
#include "flash_mla_instances_built.def"  // instances/flash_mla_instances.def as CMake filtered it
#undef FLASH_MLA_INSTANCE

FlashMlaLauncher find_flash_mla_launcher(DType dt) {
  const std::string name = dt == DType::kFp16 ? "fp16" : dt == DType::kBf16 ? "bf16" : "";
  (void)name;
#define FLASH_MLA_INSTANCE(D, N, T) \
  if (name == #N) return &launch_flash_mla_d##D##_##N;
#include "flash_mla_instances_built.def"
#undef FLASH_MLA_INSTANCE
  return nullptr;
}

#define FLASH_MLA_SM90_INSTANCE(D, N, T) void launch_flash_mla_sm90_d##D##_##N(const FlashParams&, dim3, cudaStream_t);
#include "flash_mla_sm90_instances_built.def"  // empty unless the build targets sm_90
#undef FLASH_MLA_SM90_INSTANCE

FlashMlaSm90Launcher find_flash_mla_sm90_launcher(DType dt) {
  const std::string name = dt == DType::kFp16 ? "fp16" : dt == DType::kBf16 ? "bf16" : "";
  (void)name;
#define FLASH_MLA_SM90_INSTANCE(D, N, T) \
  if (name == #N) return &launch_flash_mla_sm90_d##D##_##N;
#include "flash_mla_sm90_instances_built.def"
#undef FLASH_MLA_SM90_INSTANCE
  return nullptr;
}

std::string flash_mla_check(const CaseSpec& c) {
  const std::string rule = ": cuda.flash's MLA kernel runs the absorbed form with the plain logit and the built-in masks";
  if (c.dtype != DType::kBf16 && c.dtype != DType::kFp16)
    return "dtype " + std::string(dtype_name(c.dtype)) + " with /mla" + rule + " in bf16 / fp16";
  if (c.mla->kv_lora_rank != kMlaRank || c.mla->rope_dim != kMlaRope)
    return "/mla/kv_lora_rank " + std::to_string(c.mla->kv_lora_rank) + ", /mla/rope_dim " + std::to_string(c.mla->rope_dim) +
           rule + " at kv_lora_rank 512 and rope_dim 64 only";
  if (c.fp8_kv() || c.fp8_attention) return "an FP8 KV cache or FP8 attention with /mla" + rule + " (no FP8)";
  if (c.has_sinks()) return "/attention/sinks with /mla" + rule + " (no sinks)";
  if (c.attention.soft_cap || c.attention.alibi) return "/attention/soft_cap or /attention/alibi with /mla" + rule;
  if (c.attention.score_mod || c.attention.mask_mod) return "/attention/score_mod or /attention/mask_mod with /mla" + rule;
  if (c.has_trees()) return "/requests/i/tree_parents with /mla" + rule + " (trees need mask_mod bits)";
  if (!find_flash_mla_launcher(c.dtype)) return "/mla: this build has no MLA kernel for " + std::string(dtype_name(c.dtype));
  return "";
}

namespace {

// The CTAs of a plan: its items grouped, in plan order, by (unit, KV chunk, key range), runs of adjacent
// row tiles of up to 64 rows (slots = 64 / tile per CTA, -1 filling a short run), so a CTA reads a
// chunk's latent once for up to 64 rows. The grouping changes no row's sums (each row's logits, maxima
// and output are its own): a request's bits do not depend on its neighbours. heavy_first: the plan's
// last groups first, as flash.cu orders items.
std::vector<int> group_items(const SplitPlan& sp, int slots, bool heavy_first, int* n_ctas) {
  std::map<std::tuple<int, int, int, int>, std::vector<int>> runs;
  std::vector<std::tuple<int, int, int, int>> order;
  for (int i = 0; i < sp.num_items; ++i) {
    const WorkItem& it = sp.items[i];
    const auto key = std::make_tuple(it.unit, it.kv_chunk, it.kv_begin, it.kv_end);
    auto [pos, fresh] = runs.try_emplace(key);
    if (fresh) order.push_back(key);
    pos->second.push_back(i);
  }
  std::vector<std::vector<int>> ctas;
  for (const auto& key : order) {
    std::vector<int> items = runs[key];
    std::sort(items.begin(), items.end(), [&](int a, int b) { return sp.items[a].row_begin < sp.items[b].row_begin; });
    for (size_t i = 0; i < items.size(); ++i) {
      const bool joins = !ctas.empty() && static_cast<int>(ctas.back().size()) < slots && i > 0 &&
                         sp.items[items[i - 1]].row_end == sp.items[items[i]].row_begin;
      if (joins)
        ctas.back().push_back(items[i]);
      else
        ctas.push_back({items[i]});
    }
  }
  if (heavy_first) std::reverse(ctas.begin(), ctas.end());
  std::vector<int> flat;
  for (const auto& c : ctas) {
    flat.insert(flat.end(), c.begin(), c.end());
    flat.insert(flat.end(), slots - c.size(), -1);
  }
  *n_ctas = static_cast<int>(ctas.size());
  return flat;
}

}  // namespace

Result run_flash_mla(const CaseSpec& c, const Plan& p, const RunOptions& opt, bool heavy_first, bool hopper) {
  Result res;
  res.backend = "cuda.flash";
  const SplitPlan& sp = p.split;
  const int Hq = c.num_qo_heads, DV = kMlaVoDim;
  if (c.head_dim_qk != kMlaQkDim || c.head_dim_vo != DV || c.num_kv_heads != 1)
    throw CudaError("cuda.flash: an absorbed MLA case with head dims " + std::to_string(c.head_dim_qk) + " / " +
                    std::to_string(c.head_dim_vo) + " and " + std::to_string(c.num_kv_heads) +
                    " KV heads (576 / 512 and 1 expected)");
  if (sp.cta_tile_q > 64)
    throw CudaError("cuda.flash: MLA query tiles of at most 64 rows (the plan has " + std::to_string(sp.cta_tile_q) + ")");
  const int64_t total_q = c.total_q();
  const int64_t part_rows = sp.split_kv ? sp.o_indptr.back() : 0;
  const int eb = dtype_bytes(c.dtype);
  const int64_t need = device_workload_bytes(c, p) + total_q * Hq * (DV * eb + 4) + part_rows * Hq * (DV + 1) * 4 +
                       static_cast<int64_t>(sp.items.size()) * sizeof(WorkItem);
  require_device_memory(need, "cuda.flash (MLA inputs, outputs, split-KV partials)");
  const auto shared_w = device_workload(c, p, opt);
  const DeviceWorkload& w = *shared_w;

  const std::vector<int64_t> unit_tok = unit_first_tokens(c, p);
  DeviceBuffer d_items = DeviceBuffer::from(sp.items), d_units = DeviceBuffer::from(p.units),
               d_tok = DeviceBuffer::from(unit_tok), d_chunks = DeviceBuffer::from(sp.unit_chunks),
               d_oind = DeviceBuffer::from(sp.o_indptr), d_mind = DeviceBuffer::from(sp.merge_indptr);
  const FlashOutputs out(total_q, Hq, DV, part_rows, c.dtype);

  FlashParams fp{};
  fp.view = w.view;
  fp.q = w.q.as<void>();
  fp.k = w.k.as<void>();  // the latent rows [ckv ; kpe]; the kernel reads V as their first 512 dims
  fp.v = w.v.as<void>();
  fp.items = d_items.as<WorkItem>();
  fp.units = d_units.as<WorkUnit>();
  fp.unit_tok = d_tok.as<int64_t>();
  fp.unit_chunks = d_chunks.as<int>();
  fp.o_indptr = d_oind.as<int>();
  // up to 64 rows per CTA: as many items of one chunk as fit (a plan of one item per chunk: one slot)
  const int ib = std::max(1, sp.cta_tile_q / 16);
  // slots per CTA: the longest run of items sharing a chunk, at most 64 rows (grouped at the most first)
  const int most = 64 / (ib * 16);
  int n_ctas = 0, max_run = 1;
  const std::vector<int> widest = group_items(sp, most, false, &n_ctas);
  for (int x = 0; x < n_ctas; ++x) {
    int used = 0;
    for (int s = 0; s < most; ++s) used += widest[x * most + s] >= 0;
    max_run = std::max(max_run, used);
  }
  // the wgmma kernel's CTAs are always 64 rows (every grouping the same kernel, so the same bits)
  const FlashMlaSm90Launcher sm90 = hopper ? find_flash_mla_sm90_launcher(c.dtype) : nullptr;
  const int slots = sm90 ? most : max_run == 3 ? 4 : max_run;  // mma.sync: kernels of 1, 2 and 4 row groups
  const std::vector<int> cta_items = group_items(sp, slots, heavy_first, &n_ctas);
  DeviceBuffer d_cta_items = DeviceBuffer::from(cta_items.empty() ? std::vector<int>{-1} : cta_items);
  fp.mla_items = d_cta_items.as<int>();
  fp.mla_item_blocks = ib;
  fp.num_items = n_ctas;
  fp.hq = Hq;
  fp.hk = 1;
  fp.group = c.group_size();
  fp.sm_scale = static_cast<float>(c.sm_scale_or_default());
  fp.scale_log2 = fp.sm_scale * static_cast<float>(kLog2e);
  fp.split = sp.split_kv ? 1 : 0;
  fp.round_partials = c.split.partials == PartialPrecision::kDtype ? 1 : 0;
  out.bind(fp);

  const FlashMlaLauncher launch = find_flash_mla_launcher(c.dtype);
  if (!launch) throw CudaError("cuda.flash: no MLA kernel built for " + std::string(dtype_name(c.dtype)));
  const int rg = slots * ib;
  const dim3 grid(static_cast<unsigned>(std::max(n_ctas, 1)), 1, 1);
  const dim3 block(static_cast<unsigned>(sm90 ? 256 : rg * 64));
  const size_t smem = sm90 ? flash_mla_sm90_smem_bytes() : flash_mla_smem_bytes(rg);
  const std::string per_cta = std::to_string(slots) + " item(s) of " + std::to_string(sp.cta_tile_q) + " rows per CTA";
  const std::string kname =
      sm90 ? "flash_mla_sm90_kernel<" + std::string(dtype_name(c.dtype)) +
                 ", 64 rows, two warpgroups: S on 32 keys and O on 256 dims each, P shared in the tile> (wgmma), " + per_cta
           : "flash_mla_kernel<" + std::string(dtype_name(c.dtype)) + ", " + std::to_string(rg) +
                 " row groups, qk 576 / vo 512, V read from K's tile, P V on " +
                 (rg >= 2 ? "32 rows x 128 dims" : "16 rows x 256 dims") + " per warp> (mma.sync), " + per_cta;
  res.message = "kernel " + kname;
  FlashTail tail;
  tail.kernel = [&](bool sync) {
    if (sm90)
      sm90(fp, grid, nullptr);
    else
      launch(fp, rg * 16, grid, nullptr);
    check_launch(kname.c_str(), grid, block, smem, sync);
  };
  tail.has_items = n_ctas > 0;
  tail.split_kv = sp.split_kv;
  tail.grid = grid;
  tail.block = block;
  run_flash_tail(tail, out, out.merge(d_mind), c.dtype, DV, opt, &res);
  return res;
}

}  // namespace attnscope::cuda
