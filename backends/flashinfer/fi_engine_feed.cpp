// vLLM's FlashInfer metadata (engine_metadata_vllm.cpp) as the FiUnits flashinfer.decode and
// flashinfer.prefill launch: what each wrapper's plan receives in FlashInferImpl.forward, checked
// against the pool and the case before any launch (fi_engine_feed.h).
#include "fi_engine_feed.h"

#include <algorithm>

namespace attnscope::peers::flashinfer {

namespace {

const std::string kAt = "/engine vllm-flashinfer: ";
std::string str(int64_t x) { return std::to_string(x); }

std::string ints_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + "]";
}

// The engine tensor `name` as int32 values, or the refusal naming it.
std::string int32_tensor(const EngineView& v, const std::string& name, std::vector<int>* out) {
  const EngineTensor* t = v.find(name);
  if (!t) return kAt + "the " + v.mode + " view has no " + name;
  if (t->dtype != "int32" && t->dtype != "int")
    return kAt + name + " is " + t->dtype + ": FlashInfer's plan and kernels read int32 indices (IdType int32_t)";
  out->clear();
  for (int64_t x : t->values) {
    if (x < INT32_MIN || x > INT32_MAX) return kAt + name + " holds " + str(x) + ", past int32 (FlashInfer's IdType)";
    out->push_back(static_cast<int>(x));
  }
  return "";
}

// Per entry of vLLM's batch (request or virtual batch): the position it belongs to, and attnscope's
// absolute position of its first query and key. "" or the refusal.
struct Entries {
  std::vector<int> position, q_len;
  std::vector<int64_t> q_abs_first;
  std::vector<int> kv_begin;
};
std::string map_entries(const CaseSpec& c, const std::vector<int>& order, const std::vector<int>& qsl,
                        const std::vector<int>& seq, Entries* e) {
  const int n = static_cast<int>(qsl.size()) - 1;
  if (n < 1 || static_cast<int>(seq.size()) != n)
    return kAt + "query_start_loc holds " + str(n + 1) + " offsets and seq_lens " + str(static_cast<int64_t>(seq.size())) +
           " lengths: the batch is [num_reqs + 1] / [num_reqs]";
  int pos = 0, done = 0;  // queries of the position's request already covered
  for (int i = 0; i < n; ++i) {
    if (pos >= static_cast<int>(order.size()))
      return kAt + "query_start_loc: entry " + str(i) + " is past the batch's " + str(static_cast<int64_t>(order.size())) +
             " requests";
    const int r = order[pos];
    const RequestSpec& q = c.requests[r];
    const int sq = qsl[i + 1] - qsl[i], sk = seq[i];
    const std::string req = "/requests/" + str(r);
    if (sq < 1 || done + sq > q.q_len)
      return kAt + "query_start_loc[" + str(i) + ".." + str(i + 1) + "] gives entry " + str(i) + " " + str(sq) +
             " queries, but " + req + "/q_len " + str(q.q_len) + " has " + str(q.q_len - done) +
             " left: Q rows would be read for the wrong request";
    const int64_t q_abs = static_cast<int64_t>(q.kv_len) - q.q_len + done;
    const int64_t kv_begin = q_abs + sq - sk;  // FlashInfer's causal mask aligns the entry's queries bottom-right
    if (sk < sq || kv_begin < 0)
      return kAt + "seq_lens[" + str(i) + "] = " + str(sk) + " with " + str(sq) + " queries at position " + str(q_abs) + " of " +
             req + "/kv_len " + str(q.kv_len) + ": the causal kernel would attend keys the case's K/V does not hold";
    e->position.push_back(pos);
    e->q_len.push_back(sq);
    e->q_abs_first.push_back(q_abs);
    e->kv_begin.push_back(static_cast<int>(kv_begin));
    done += sq;
    if (done == q.q_len) {
      ++pos;
      done = 0;
    }
  }
  if (pos != static_cast<int>(order.size()))
    return kAt + "query_start_loc covers " + str(pos) + " of the batch's " + str(static_cast<int64_t>(order.size())) +
           " requests' queries (/requests)";
  return "";
}

// One wrapper's units from its plan arguments: entries [first, first + count) of the batch. Checks
// every value the kernel reads against the pool and the entry's seq_lens.
std::string wrapper_units(const PageTable& pt, const Entries& e, const std::vector<int>& seq, const std::vector<int>& indices,
                          int first, const std::vector<int>& qo, const std::vector<int>& kv, const std::vector<int>& last,
                          const std::string& kv_name, const std::string& last_name, VllmWrapperUnits* w) {
  const int count = static_cast<int>(kv.size()) - 1, ps = pt.page_size;
  if (count < 0 || static_cast<int>(last.size()) != count || static_cast<int>(qo.size()) != count + 1)
    return kAt + kv_name + " / " + last_name + " / qo_indptr sizes disagree: " + str(static_cast<int64_t>(kv.size())) + ", " +
           str(static_cast<int64_t>(last.size())) + ", " + str(static_cast<int64_t>(qo.size()));
  FiUnits& u = w->units;
  u.page_size = ps;
  u.qo_indptr = qo;
  u.kv_indptr = kv;
  u.kv_indices = indices;
  u.kv_last_page_len = last;
  for (int j = 0; j < count; ++j) {
    const int i = first + j, pages = kv[j + 1] - kv[j], sk = seq[i];
    const std::string at = "[" + str(j) + "]";
    if (qo[j + 1] - qo[j] != e.q_len[i])
      return kAt + "qo_indptr" + at + " gives " + str(qo[j + 1] - qo[j]) + " queries where query_start_loc gives entry " +
             str(i) + " " + str(e.q_len[i]) + ": the wrapper's plan disagrees with the batch";
    if (pages != (sk + ps - 1) / ps || kv[j] < 0 || kv[j + 1] > static_cast<int>(indices.size()))
      return kAt + kv_name + at + ".." + str(j + 1) + " spans " + str(pages) + " pages of paged_kv_indices (" +
             str(static_cast<int64_t>(indices.size())) + " entries); seq_lens[" + str(i) + "] = " + str(sk) +
             " needs ceil(seq_len / page_size " + str(ps) + ") = " + str((sk + ps - 1) / ps);
    if (last[j] < 1 || last[j] > ps || (pages > 0 && last[j] != sk - (pages - 1) * ps))
      return kAt + last_name + at + " = " + str(last[j]) + ": the kernel reads that many keys of the last page; seq_lens[" +
             str(i) + "] = " + str(sk) + " over " + str(pages) + " pages of " + str(ps) + " needs " + str(sk - (pages - 1) * ps);
    for (int k = kv[j]; k < kv[j + 1]; ++k)
      if (indices[k] < 0 || indices[k] >= pt.num_pages)
        return kAt + "paged_kv_indices[" + str(k) + "] = " + str(indices[k]) + " (entry " + str(i) +
               ") is not a page of the pool (" + str(pt.num_pages) + " pages of " + str(ps) +
               " tokens, /kv_cache): the kernel would read outside the K/V cache";
    u.q_abs_first.push_back(e.q_abs_first[i]);
    u.kv_begin.push_back(e.kv_begin[i]);
    w->entry.push_back(i);
    w->position.push_back(e.position[i]);
  }
  u.total_q = qo.empty() ? 0 : qo.back() - qo.front();
  return "";
}

}  // namespace

const char* fi_wrapper_name(FiWrapper w) { return w == FiWrapper::kDecode ? "decode wrapper" : "prefill wrapper"; }

VllmFeed vllm_feed_from_view(const CaseSpec& c, const PageTable& pt, const EngineView& v) {
  VllmFeed f;
  f.mode = v.mode;
  f.mismatches = v.mismatches;
  f.request_order = v.request_order;
  if (v.refusal) {
    f.refusal = kAt + *v.refusal;
    return f;
  }
  std::vector<int> qsl, seq, indptr, indices, last, nd;
  for (const auto& [name, out] : {std::pair{"query_start_loc", &qsl},
                                  {"seq_lens", &seq},
                                  {"paged_kv_indptr", &indptr},
                                  {"paged_kv_indices", &indices},
                                  {"paged_kv_last_page_len", &last},
                                  {"num_decodes", &nd}})
    if (auto why = int32_tensor(v, name, out); !why.empty()) {
      f.refusal = why;
      return f;
    }
  Entries e;
  if (auto why = map_entries(c, f.request_order, qsl, seq, &e); !why.empty()) {
    f.refusal = why;
    return f;
  }
  const int n = static_cast<int>(seq.size());
  f.num_decodes = nd.empty() ? 0 : nd[0];
  f.num_prefills = n - f.num_decodes;
  if (f.num_decodes < 0 || f.num_decodes > n) {
    f.refusal = kAt + "num_decodes = " + str(f.num_decodes) + " is not in [0, " + str(n) + "]";
    return f;
  }
  if (f.num_decodes > 0) {
    std::vector<int> kv, lp;
    const std::string pre = "decode_wrapper.plan.";
    for (const auto& [name, out] : {std::pair{pre + "indptr", &kv}, {pre + "last_page_len", &lp}})
      if (auto why = int32_tensor(v, name, out); !why.empty()) {
        f.refusal = why;
        return f;
      }
    std::vector<int> qo(f.num_decodes + 1);
    for (int i = 0; i <= f.num_decodes; ++i) qo[i] = qsl[i];  // the decode wrapper runs one query per request
    f.decode.tensors = {"paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len"};
    f.refusal = wrapper_units(pt, e, seq, indices, 0, qo, kv, lp, pre + "indptr", pre + "last_page_len", &f.decode);
    if (f.refusal.empty())
      for (int j = 0; j < f.num_decodes; ++j)
        if (e.q_len[j] != 1)
          f.refusal = kAt + "query_start_loc: decode entry " + str(j) + " holds " + str(e.q_len[j]) +
                      " queries; the decode wrapper runs one per request";
    if (!f.refusal.empty()) return f;
  }
  if (f.num_prefills > 0) {
    std::vector<int> qo, kv, lp;
    const std::string pre = "prefill_wrapper.plan.";
    for (const auto& [name, out] :
         {std::pair{pre + "qo_indptr", &qo}, {pre + "paged_kv_indptr", &kv}, {pre + "paged_kv_last_page_len", &lp}})
      if (auto why = int32_tensor(v, name, out); !why.empty()) {
        f.refusal = why;
        return f;
      }
    f.prefill.tensors = {"qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len"};
    f.refusal = wrapper_units(pt, e, seq, indices, f.num_decodes, qo, kv, lp, pre + "paged_kv_indptr",
                              pre + "paged_kv_last_page_len", &f.prefill);
  }
  return f;
}

VllmFeed vllm_feed(const CaseSpec& c, const Plan& p) {
  return vllm_feed_from_view(c, p.pages, engine_metadata(Engine::kVllmFlashInfer, c, p));
}

namespace {

// The wrapper's units regrouped in the case's request order, indptrs from 0 (vLLM's reorder moves
// whole requests, Q rows with them: the same work per request, in attnscope's row order).
FiUnits in_case_order(const VllmWrapperUnits& w, const std::vector<int>& order) {
  const FiUnits& s = w.units;
  FiUnits u;
  u.page_size = s.page_size;
  u.qo_indptr = {0};
  u.kv_indptr = {0};
  for (size_t r = 0; r < order.size(); ++r) {
    const int pos = static_cast<int>(std::find(order.begin(), order.end(), static_cast<int>(r)) - order.begin());
    for (size_t j = 0; j < w.position.size(); ++j) {
      if (w.position[j] != pos) continue;
      u.qo_indptr.push_back(u.qo_indptr.back() + s.qo_indptr[j + 1] - s.qo_indptr[j]);
      for (int k = s.kv_indptr[j]; k < s.kv_indptr[j + 1]; ++k) u.kv_indices.push_back(s.kv_indices[k]);
      u.kv_indptr.push_back(static_cast<int>(u.kv_indices.size()));
      u.kv_last_page_len.push_back(s.kv_last_page_len[j]);
      u.q_abs_first.push_back(s.q_abs_first[j]);
      u.kv_begin.push_back(s.kv_begin[j]);
    }
  }
  u.total_q = u.qo_indptr.back();
  return u;
}

// "" when the fed units are attnscope's own, else the first difference.
std::string units_differ(const FiUnits& a, const FiUnits& b) {
  if (a.qo_indptr != b.qo_indptr) return "qo_indptr " + ints_text(a.qo_indptr) + " vs attnscope's " + ints_text(b.qo_indptr);
  if (a.kv_indptr != b.kv_indptr) return "kv pages per entry " + ints_text(a.kv_indptr) + " vs " + ints_text(b.kv_indptr);
  if (a.kv_indices != b.kv_indices) return "the pages read differ from attnscope's page table";
  if (a.kv_last_page_len != b.kv_last_page_len)
    return "last_page_len " + ints_text(a.kv_last_page_len) + " vs " + ints_text(b.kv_last_page_len);
  if (a.kv_begin != b.kv_begin) return "first keys " + ints_text(a.kv_begin) + " vs " + ints_text(b.kv_begin);
  return "";
}

}  // namespace

std::string feed_units(const CaseSpec& c, const Plan& p, FiWrapper w, FiUnits* u, std::string* fed) {
  fed->clear();
  if (c.engine != engine_id(Engine::kVllmFlashInfer)) return "";
  const VllmFeed f = vllm_feed(c, p);
  if (!f.refusal.empty()) return f.refusal;
  const bool dec = w == FiWrapper::kDecode;
  const VllmWrapperUnits& mine = dec ? f.decode : f.prefill;
  const VllmWrapperUnits& other = dec ? f.prefill : f.decode;
  if (!other.entry.empty()) {
    std::vector<int> reqs;
    for (int pos : other.position)
      if (reqs.empty() || reqs.back() != f.request_order[pos]) reqs.push_back(f.request_order[pos]);
    return kAt + "vLLM gives requests " + ints_text(reqs) + " to its " +
           fi_wrapper_name(dec ? FiWrapper::kPrefill : FiWrapper::kDecode) +
           ": split_decodes_and_prefills (decode_threshold 1, after reorder_batch_to_split_decodes_and_prefills) puts the " +
           str(f.num_decodes) + " leading entries of query length 1 on the decode wrapper and the " + str(f.num_prefills) +
           " others on the prefill wrapper; flashinfer." + (dec ? "decode" : "prefill") + " runs the " + fi_wrapper_name(w) +
           " only (" + f.mode + " batch)";
  }
  if (!c.attention.causal || choose_mask(c, p) == FiMask::kCustom) {
    std::string why;
    choose_mask(c, p, &why);
    return kAt + "vLLM plans the wrappers with causal=True and no custom mask; " + why;
  }
  const FiUnits mine_u = in_case_order(mine, f.request_order);
  if (mine_u.total_q != c.total_q())
    return kAt + "the " + std::string(fi_wrapper_name(w)) + "'s units hold " + str(mine_u.total_q) + " queries of the case's " +
           str(c.total_q());
  const int entries = static_cast<int>(mine.entry.size());
  *fed = "fed from vLLM's ";
  for (size_t i = 0; i < mine.tensors.size(); ++i) *fed += (i ? ", " : "") + mine.tensors[i];
  *fed += std::string(" (") + fi_wrapper_name(w) + ", " + str(entries) +
          (c.attention.local_chunk ? " virtual batches of chunked local attention" : " requests") + ", " + f.mode + ")";
  bool moved = false;
  for (size_t i = 0; i < f.request_order.size(); ++i) moved = moved || f.request_order[i] != static_cast<int>(i);
  if (moved) *fed += "; vLLM's batch order " + ints_text(f.request_order) + " runs in the case's row order";
  const std::string diff = units_differ(mine_u, *u);
  *fed += diff.empty() ? "; equal to attnscope's own units"
                       : "; the engine's values differ from attnscope's own units (" + diff + ")";
  *u = mine_u;
  return "";
}

}  // namespace attnscope::peers::flashinfer
