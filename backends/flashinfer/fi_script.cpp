// The flashinfer family's repro-script writer (ScriptPart in backend.h): FlashInfer's paged
// wrappers on attnscope's own pool and page table. The translation of the case comes from
// fi_conventions.h, the one place the backends take it from, so the script plans exactly what
// attnscope's backend planned. Host code only: compiled in every build.
#include "fi_script.h"

#include "attnscope/fp8.h"
#include "attnscope/py_text.h"
#include "fi_conventions.h"
#include "fi_mla_script.h"

namespace attnscope::peers::flashinfer {

namespace {

constexpr const char* kPin = "0.7.2.post1";  // the wheel whose headers the flashinfer.* backends compile

// The wrapper a backend's script calls.
enum class Api {
  kPrefill,      // BatchPrefillWithPagedKVCacheWrapper, backend "fa2" (flashinfer.prefill)
  kPrefillSm90,  // the same wrapper, backend "fa3" (flashinfer.prefill_sm90)
  kDecode,       // BatchDecodeWithPagedKVCacheWrapper, CUDA-core decode (flashinfer.decode)
};

Api api_of(const std::string& id) {
  return id == "flashinfer.decode" ? Api::kDecode : id == "flashinfer.prefill_sm90" ? Api::kPrefillSm90 : Api::kPrefill;
}

// Why FlashInfer's Python API cannot run the case's FP8 settings ("" = it can). Its wrappers take one
// k_scale and one v_scale per call (run(..., k_scale=, v_scale=): floats, folded into sm_scale and
// multiplied into the output); FP8 attention (an FP8 query) is its fa3 kernel's, which in turn takes
// an FP8 cache only with an FP8 query (is_fa3_backend_supported).
std::string fp8_refusal(const CaseSpec& c, Api api) {
  if (!c.fp8_kv()) return "";
  const auto g = c.kv_cache.scales.granularity;
  if (g != ScaleGranularity::kTensor)
    return std::string(
               "FlashInfer's wrappers take one k_scale and one v_scale per call (run(..., k_scale=, v_scale=) "
               "floats, per tensor), not ") +
           granularity_name(g) + " scales";
  if (c.fp8_attention && api != Api::kPrefillSm90)
    return std::string(api == Api::kDecode ? "FlashInfer's CUDA-core decode" : "FlashInfer's fa2 prefill") +
           " takes an FP8 KV cache with a " + dtype_name(c.dtype) +
           " query, not FP8 attention (an FP8 query, /fp8_attention): its fa3 (SM90) prefill runs that";
  if (!c.fp8_attention && api == Api::kPrefillSm90)
    return "FlashInfer's fa3 (SM90) prefill takes an FP8 KV cache only with an FP8 query (is_fa3_backend_supported: "
           "FP8 attention, /fp8_attention); its fa2 prefill takes an FP8 cache with a " +
           std::string(dtype_name(c.dtype)) + " query";
  return "";
}

// The label and API of the header, and why the wrapper cannot express the case (empty: it can).
void choose(const CaseSpec& c, const Plan& p, Api api, ScriptPart* part) {
  const std::string lib = std::string("FlashInfer ") + kPin + " ";
  std::string why;
  const bool custom = choose_mask(c, p, &why) == FiMask::kCustom;
  part->refusal = variant_refusal(c);
  auto refuse = [&](bool when, const std::string& reason) {
    if (when && part->refusal.empty()) part->refusal = reason;
  };
  switch (api) {
    case Api::kPrefill:
      part->label = "FlashInfer prefill (fa2)";
      part->library = lib + "BatchPrefillWithPagedKVCacheWrapper, backend \"fa2\"";
      break;
    case Api::kPrefillSm90:
      part->label = "FlashInfer prefill (fa3)";
      part->library = lib + "BatchPrefillWithPagedKVCacheWrapper, backend \"fa3\"";
      refuse(custom,
             "FlashInfer's fa3 (SM90) prefill has no custom mask (is_fa3_backend_supported), and this case needs one: " + why);
      refuse(c.attention.alibi, "FlashInfer's fa3 (SM90) prefill has no ALiBi (is_fa3_backend_supported)");
      break;
    case Api::kDecode:
      part->label = "FlashInfer decode";
      part->library = lib + "BatchDecodeWithPagedKVCacheWrapper, CUDA-core decode (use_tensor_cores=False)";
      for (size_t r = 0; r < c.requests.size(); ++r)
        refuse(c.requests[r].q_len != 1, "request " + std::to_string(r) + " has q_len " + std::to_string(c.requests[r].q_len) +
                                             ": BatchDecodeWithPagedKVCacheWrapper runs one query per request "
                                             "(flashinfer.prefill runs the rest)");
      refuse(c.head_dim_qk != c.head_dim_vo, "FlashInfer's decode takes one head_dim; this case has qk " +
                                                 std::to_string(c.head_dim_qk) + ", vo " + std::to_string(c.head_dim_vo));
      refuse(custom, "FlashInfer's decode kernel has no custom mask, and this case needs one: " + why);
      break;
  }
  const std::string fp8 = fp8_refusal(c, api);
  refuse(!fp8.empty(), fp8);
}

// UNITS: the requests FlashInfer runs (vLLM's virtual batches under chunked local attention), for
// the custom mask and ALiBi's LSE shift.
std::string units_constant(const CaseSpec& c, const Plan& p) {
  if (!c.attention.alibi && choose_mask(c, p) != FiMask::kCustom) return "";
  const FiUnits u = fi_units(c, p);
  std::vector<std::string> rows;
  for (size_t i = 0; i < p.units.size(); ++i) {
    const WorkUnit& w = p.units[i];
    // appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on "literal" + std::string&& chains
    std::string row = "(";
    for (const int64_t x : {int64_t{w.request}, int64_t{w.q_begin}, int64_t{w.q_len}, int64_t{u.kv_begin[i]}, int64_t{w.kv_len}})
      row.append(row.size() > 1 ? ", " : "").append(std::to_string(x));
    rows.push_back(row + ")");
  }
  return std::string("# FlashInfer's requests") + (p.local.batches.empty() ? "" : " (vLLM's virtual batches)") +
         ": (request, first query, queries, first key, keys)\n" + py_assign("UNITS", rows);
}

// The pool exactly as attnscope's kernels read it, so FlashInfer sees the same physical pages,
// layout and poisoned slots; and FlashInfer's int32 CSR page table of the same units.
int write_arrays(const CaseSpec& c, const Plan& p, const Workload& w, const ScriptNpyWriter& out) {
  const PageTable& pt = p.pages;
  const int64_t P = pt.num_pages, ps = pt.page_size, Hk = c.num_kv_heads;
  auto shape = [&](int64_t d) {
    return c.kv_cache.layout == KvLayout::kNHD ? std::vector<int64_t>{P, ps, Hk, d} : std::vector<int64_t>{P, Hk, ps, d};
  };
  out.f32("k_cache.npy", w.k_pool, shape(c.head_dim_qk));
  out.f32("v_cache.npy", w.v_pool, shape(c.head_dim_vo));
  const FiUnits u = fi_units(c, p);
  const int64_t B = static_cast<int64_t>(u.kv_last_page_len.size());
  out.i32("qo_indptr.npy", u.qo_indptr, {B + 1});
  out.i32("kv_indptr.npy", u.kv_indptr, {B + 1});
  out.i32("kv_indices.npy", u.kv_indices, {static_cast<int64_t>(u.kv_indices.size())});
  out.i32("kv_last_page_len.npy", u.kv_last_page_len, {B});
  return 6;
}

// FP8 (the case as fp8_refusal lets through: per-tensor scales): the dtypes of plan() and the scales
// of run(), read from the scale files the app writes for every FP8 script (k_scale.npy, ...).
std::string fp8_text(const CaseSpec& c) {
  if (!c.fp8_kv()) return "";
  const std::string f8 = *c.kv_cache.fp8 == Fp8Format::kE4M3 ? "torch.float8_e4m3fn" : "torch.float8_e5m2";
  std::string t = "    kv_dt = " + f8 + "  # attnscope's " + fp8_name(*c.kv_cache.fp8) + ": the pool's stored values, exact\n";
  t += c.fp8_attention ? "    q_dt = kv_dt  # FP8 attention: q.npy holds Q's stored FP8 values too; the output is in DTYPE\n"
                       : "    q_dt = dt\n";
  t += py_comment("    # ", "    # ",
                  "per-tensor scales (value = stored * scale): FlashInfer's run() folds q_scale * k_scale into sm_scale and "
                  "multiplies its output by v_scale after the kernel, in the output dtype");
  t += std::string("    ") +
       (c.fp8_attention ? "q_scale, k_scale, v_scale = (float(load(n)[0]) for n in (\"q_scale\", "
                        : "k_scale, v_scale = (float(load(n)[0]) for n in (") +
       "\"k_scale\", \"v_scale\"))\n";
  return t;
}

// FlashInfer: the wrapper on attnscope's own pool and page table, planned with fi_conventions.h's
// translation of the case, each argument with the why of its value.
std::string run_library_fn(const CaseSpec& c, const Plan& p, Api api) {
  const bool decode = api == Api::kDecode, sm90 = api == Api::kPrefillSm90;
  std::string why;
  const bool custom = choose_mask(c, p, &why) == FiMask::kCustom;
  const SplitArgs sa = split_args(c);
  const std::string I = "        ";  // the indent of plan()'s arguments
  std::string pool = "# attnscope's pool as its kernels read it: [pages, " +
                     std::string(c.kv_cache.layout == KvLayout::kHND ? "kv_heads, page_size" : "page_size, kv_heads") +
                     ", dim] (" + layout_name(c.kv_cache.layout) + ")";
  if (c.kv_cache.storage == KvStorage::kRagged) pool += "; ragged storage is the paged layout with page_size 1";
  if (c.kv_cache.null_page) pool += "; page 0 is vLLM's null page, never referenced";
  if (c.kv_cache.poison_unused)
    pool += "; unused pages and slots hold NaN (kv_cache.poison_unused): a correct kernel never reads them";
  std::string tables =
      py_comment("    # ", "    # ",
                 std::string("FlashInfer's CSR page table, int32: ") + (decode ? "" : "qo_indptr (query rows), ") +
                     "kv_indptr (pages), kv_indices (physical page ids in key order), kv_last_page_len "
                     "(tokens in each last page)");
  if (!p.local.batches.empty())
    tables = py_comment("    # ", "    # ",
                        "chunked local attention (chunk " + std::to_string(*c.attention.local_chunk) +
                            "): vLLM runs FlashInfer on virtual batches, one causal request per chunk that a request's queries "
                            "touch, each with its sliced block table (make_local_attention_virtual_batches); the CSR arrays are "
                            "those " +
                            std::to_string(p.units.size()) + " virtual batches") +
             tables;
  std::string mask;
  if (custom)
    mask =
        py_comment("    # ", "    # ",
                   "no FlashInfer mask mode gives every query the keys attnscope's mask allows (" + why +
                       "), so the mask goes in as custom_mask: per request the row-major [q_len, kv_len] booleans of allowed() "
                       "(plan() packs them, little bit order)") +
        "    custom_mask = np.concatenate([\n"
        "        allowed(r, KV_LEN[r] - Q_LEN[r] + qb + np.arange(ql)[:, None], kb + np.arange(kl)[None, :]).ravel()\n"
        "        for r, qb, ql, kb, kl in UNITS])\n";
  std::string ctor =
      decode ? "BatchDecodeWithPagedKVCacheWrapper(\n" + I + "workspace, kv_layout=\"" + layout_name(c.kv_cache.layout) +
                   "\", use_tensor_cores=False,  # CUDA-core decode, as attnscope's flashinfer.decode\n"
             : "BatchPrefillWithPagedKVCacheWrapper(\n" + I + "workspace, kv_layout=\"" + layout_name(c.kv_cache.layout) +
                   "\", backend=\"" + (sm90 ? "fa3" : "fa2") + "\",  # the kernel of attnscope's " +
                   (sm90 ? "flashinfer.prefill_sm90\n" : "flashinfer.prefill\n");
  if (sa.enable_cuda_graph) {
    const std::string sfx = decode ? "buffer" : "buf";
    ctor += I + "# attnscope planned for CUDA graphs (/split/cuda_graph): FlashInfer then needs fixed buffers\n" + I +
            "use_cuda_graph=True, " + (decode ? "" : "qo_indptr_buf=qo_indptr, ") + "paged_kv_indptr_" + sfx + "=kv_indptr,\n" +
            I + "paged_kv_indices_" + sfx + "=kv_indices, paged_kv_last_page_len_" + sfx + "=kv_last_page_len,\n";
    if (custom && !decode)
      ctor += I + "custom_mask_buf=torch.empty(" + std::to_string(custom_mask_bytes(p)) + ", dtype=torch.uint8, device=dev),\n" +
              I + "mask_indptr_buf=torch.empty(len(UNITS) + 1, dtype=torch.int32, device=dev),\n";
  }
  std::string args =
      decode
          ? I + "kv_indptr, kv_indices, kv_last_page_len,\n" + I +
                "num_qo_heads=NUM_QO_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM_QK, page_size=" +
                std::to_string(p.pages.page_size) + ",\n" + I +
                "# decode has no causal argument: its one query is the last key and sees every earlier key\n"
          : I + "qo_indptr, kv_indptr, kv_indices, kv_last_page_len,\n" + I +
                "num_qo_heads=NUM_QO_HEADS, num_kv_heads=NUM_KV_HEADS,\n" + I +
                "head_dim_qk=HEAD_DIM_QK, head_dim_vo=HEAD_DIM_VO, page_size=" + std::to_string(p.pages.page_size) + ",\n" + I +
                (custom               ? "custom_mask=torch.from_numpy(custom_mask).to(dev),  # replaces causal\n"
                 : c.attention.causal ? "causal=True,  # bottom-right aligned within each request, as attnscope's\n"
                                      : "causal=False,  # non-causal: every key visible\n");
  args += I + (c.attention.window ? "window_left=" + std::to_string(window_left(c)) +
                                        ",  # attnscope's window W = " + std::to_string(*c.attention.window) +
                                        " counts the query itself; FlashInfer's window_left = W - 1\n"
                                  : "window_left=-1,  # no sliding window\n");
  args += I + (c.attention.soft_cap ? "logits_soft_cap=" + py_float(*c.attention.soft_cap) +
                                          ",  # cap * tanh(q.k * sm_scale / cap), before the mask\n"
                                    : "logits_soft_cap=0.0,  # no soft-cap\n");
  args += I + (c.attention.alibi ? "pos_encoding_mode=\"ALIBI\",  # FlashInfer's slopes (get_alibi_slopes) are ALIBI_SLOPES\n"
                                 : "pos_encoding_mode=\"NONE\",\n");
  args += I + (c.fp8_kv() ? "sm_scale=SM_SCALE, q_data_type=q_dt, kv_data_type=kv_dt, o_data_type=dt,\n"
                          : "sm_scale=SM_SCALE, q_data_type=dt, kv_data_type=dt,\n");
  if (sa.fixed_split_size > 0)
    args += I + "fixed_split_size=" + std::to_string(sa.fixed_split_size) +
            ",  # attnscope's planner fixed: " + std::to_string(sa.fixed_split_size) +
            (c.kv_cache.storage == KvStorage::kRagged ? " tokens" : " pages") + " per KV chunk\n";
  if (sa.disable_split_kv)
    args += decode
                ? py_comment(I + "# ", I + "# ",
                             "attnscope's planner off: the CUDA-core decode plan has no disable_split_kv (the wrapper passes it "
                             "to the tensor-core path only), so FlashInfer chooses the split itself, as in attnscope's run")
                : I + "disable_split_kv=True,  # attnscope's planner off: one KV chunk per request\n";
  for (const std::string& note : {sa.note, partials_note(c)})
    if (!note.empty()) args += py_comment(I + "# ", I + "# ", note);
  std::string alibi;
  if (c.attention.alibi)
    alibi =
        py_comment("    # ", "    # ",
                   "ALiBi: FlashInfer adds slope * (kv_idx - qo_idx) with both indices counted within each request (decode: "
                   "qo_idx = 0), attnscope slope * (k - q_abs) with absolute positions. Per row they differ by a constant, so O "
                   "is the same and attnscope's LSE = FlashInfer's + slope * (first key - q_abs of the first query)") +
        "    row = 0\n"
        "    for r, qb, ql, kb, kl in UNITS:\n"
        "        lse[row:row + ql] += np.asarray(ALIBI_SLOPES) * (kb - (KV_LEN[r] - Q_LEN[r] + qb))\n"
        "        row += ql\n";
  return py_fill(
      R"PY(

def run_library(torch, flashinfer, q):
    """FlashInfer's wrapper on the paged cache attnscope ran: the same pool, physical page ids, layout and
    page table, planned with the same arguments. Returns O and LSE (natural log)."""
    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
$(FP8)$(POOL)    k_cache, v_cache = (torch.from_numpy(load(n)).to(dev, $(KV_DT)) for n in ("k_cache", "v_cache"))
$(TABLES)    $(NAMES) = (
        torch.from_numpy(load(n)).to(dev) for n in $(FILES))
$(MASK)    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)  # 128 MB, as FlashInfer recommends
    wrapper = flashinfer.$(CTOR)    )
    wrapper.plan(
$(ARGS)    )
    o, lse = wrapper.run(torch.from_numpy(q).to(dev, $(Q_DT)), (k_cache, v_cache),$(SCALES)return_lse=True)
    # FlashInfer's LSE is base 2 (it keeps the running max in log2 units); attnscope's is natural log
    lse = lse.float().cpu().numpy().astype(np.float64) * np.log(2)
$(ALIBI)    return o.float().cpu().numpy(), lse
)PY",
      {{"POOL", py_comment("    ", "    # ", pool)},
       {"TABLES", tables},
       {"NAMES", decode ? "kv_indptr, kv_indices, kv_last_page_len" : "qo_indptr, kv_indptr, kv_indices, kv_last_page_len"},
       {"FILES", decode ? "(\"kv_indptr\", \"kv_indices\", \"kv_last_page_len\")"
                        : "(\"qo_indptr\", \"kv_indptr\", \"kv_indices\", \"kv_last_page_len\")"},
       {"MASK", mask},
       {"CTOR", ctor},
       {"ARGS", args},
       {"ALIBI", alibi},
       {"FP8", fp8_text(c)},
       {"KV_DT", c.fp8_kv() ? "kv_dt" : "dt"},
       {"Q_DT", c.fp8_kv() ? "q_dt" : "dt"},
       {"SCALES", !c.fp8_kv()       ? " "
                  : c.fp8_attention ? "\n                         q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, "
                                    : "\n                         k_scale=k_scale, v_scale=v_scale, "}});
}

}  // namespace

ScriptPart script_part(const CaseSpec& c, const Plan& p, const std::string& id) {
  ScriptPart part;
  const Api api = api_of(id);
  choose(c, p, api, &part);
  const bool mla = id == "flashinfer.mla" || id == "flashinfer.mla_sm90";
  if (mla) {
    part.label = id == "flashinfer.mla" ? "FlashInfer MLA (fa2)" : "FlashInfer MLA (fa3)";
    part.library = std::string("FlashInfer ") + kPin + " BatchMLAPagedAttentionWrapper, backend \"" +
                   (id == "flashinfer.mla" ? "fa2" : "fa3") + "\"";
    part.refusal = mla_script_refusal(c);
  } else if (c.is_mla() && part.refusal.empty()) {
    part.refusal = id + " does not run MLA cases (its descriptor); flashinfer.mla's script runs FlashInfer's MLA wrapper";
  }
  part.files_note = std::string(" k_cache.npy / v_cache.npy: attnscope's paged pool") +
                    (c.fp8_kv() ? " (its stored FP8 values)" : "") +
                    "; qo_indptr, kv_indptr, kv_indices, kv_last_page_len.npy: its page table;";
  part.module = "flashinfer";
  part.module_title = "FlashInfer";
  part.package = "flashinfer-python";
  part.pin = kPin;
  part.write_arrays = write_arrays;
  if (part.refusal.empty()) {
    part.constants = mla ? "" : units_constant(c, p);
    part.run_library = mla ? mla_run_library_fn(c, p, id == "flashinfer.mla_sm90") : run_library_fn(c, p, api);
  }
  return part;
}

}  // namespace attnscope::peers::flashinfer
