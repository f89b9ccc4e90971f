// The MLA wrapper's repro script: fi_mla_script.h. Host code only.
#include "fi_mla_script.h"

#include "attnscope/py_text.h"

namespace attnscope::peers::flashinfer {

std::string mla_script_refusal(const CaseSpec& c) {
  if (!c.mla_absorbed())
    return c.mla ? "FlashInfer's MLA wrapper runs the absorbed form; this case is non-absorbed (multi-head attention, "
                   "head dims 192 / 128)"
                 : "FlashInfer's MLA wrapper runs MLA's absorbed form; this case has no /mla";
  if (c.mla->kv_lora_rank != 512 || c.mla->rope_dim != 64)
    return "FlashInfer's MLA kernels are compiled for head_dim_ckv 512 and head_dim_kpe 64";
  if (c.dtype == DType::kFp32) return "FlashInfer's MLA wrapper takes fp16 / bf16, not fp32";
  const auto& a = c.attention;
  if (a.window || a.local_chunk || a.prefix_lm || a.soft_cap || a.alibi || a.mask_mod || a.score_mod || c.has_trees())
    return "FlashInfer's MLA plan() takes only causal=True/False: no window, local chunk, prefix-LM, soft-cap, ALiBi, "
           "mask_mod, score_mod or tree";
  for (const auto& r : c.requests)
    if (r.pad_start || !r.doc_starts.empty())
      return "FlashInfer's MLA plan() takes only causal=True/False: no padding or packed documents";
  return "";
}

std::string mla_run_library_fn(const CaseSpec& c, const Plan& p, bool fa3) {
  return py_fill(R"PY(

def run_library(torch, flashinfer, q):
    """FlashInfer's BatchMLAPagedAttentionWrapper on attnscope's latent pool and page table, planned with the
    same requests. Q is the absorbed query [tokens, heads, 576]: q_nope its first 512 dims, q_pe the rest.
    Returns O [tokens, heads, 512] and LSE (natural log)."""
    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
    # k_cache.npy is the latent pool [pages, page_size, 1, 576] (one KV head: NHD and HND are the same
    # bytes): each token's row [ckv (512) ; kpe (64)]; the ckv part is V as well
    pool = torch.from_numpy(load("k_cache")).to(dev, dt).reshape($(PAGES), $(PAGE_SIZE), 576)
    ckv_cache, kpe_cache = pool[..., :512], pool[..., 512:]
    qo_indptr, kv_indptr, kv_indices = (torch.from_numpy(load(n)).to(dev) for n in ("qo_indptr", "kv_indptr", "kv_indices"))
    kv_len = torch.tensor(KV_LEN, dtype=torch.int32, device=dev)  # keys per request (the wrapper's kv_len_arr)
    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)  # 128 MB, as FlashInfer recommends
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="$(BACKEND)")  # attnscope's $(ID)
    wrapper.plan(
        qo_indptr, kv_indptr, kv_indices, kv_len,
        num_heads=NUM_QO_HEADS, head_dim_ckv=512, head_dim_kpe=64, page_size=$(PAGE_SIZE),
        causal=$(CAUSAL),  # bottom-right aligned within each request, as attnscope's
        sm_scale=SM_SCALE,  # 1/sqrt(qk_nope + rope) = 1/sqrt(192) by default, not 1/sqrt(576)
        q_data_type=dt, kv_data_type=dt)
    qt = torch.from_numpy(q).to(dev, dt)
    o, lse = wrapper.run(qt[..., :512].contiguous(), qt[..., 512:].contiguous(), ckv_cache, kpe_cache, return_lse=True)
    # FlashInfer's LSE is base 2 (it keeps the running max in log2 units); attnscope's is natural log
    return o.float().cpu().numpy(), lse.float().cpu().numpy().astype(np.float64) * np.log(2)
)PY",
                 {{"PAGES", std::to_string(p.pages.num_pages)},
                  {"PAGE_SIZE", std::to_string(p.pages.page_size)},
                  {"BACKEND", fa3 ? "fa3" : "fa2"},
                  {"ID", fa3 ? "flashinfer.mla_sm90 (mla_hopper.cuh)" : "flashinfer.mla (mla.cuh)"},
                  {"CAUSAL", c.attention.causal ? "True" : "False"}});
}

}  // namespace attnscope::peers::flashinfer
