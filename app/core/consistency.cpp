// Decode versus prefill (docs/conventions.md section 11): derived cases, runs, position-wise comparison.
#include "consistency.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>

#include "attnscope/expr_program.h"
#include "attnscope/mask.h"
#include "attnscope/mask_bits.h"
#include "attnscope/mask_expr.h"
#include "attnscope/paging.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "session.h"

namespace attnscope {

namespace {

constexpr int64_t kMaxHostWorkloadBytes = int64_t{12} << 30;  // as a session: no CPU run past 12 GiB of inputs

std::string req_path(int r, const char* field) { return "/requests/" + std::to_string(r) + "/" + field; }

// A score_mod that reads q_len or kv_len gives a decode step other logits than the prefill.
void check_score_mod(const CaseSpec& c) {
  if (!c.attention.score_mod) return;
  const Expr e = Expr::parse(*c.attention.score_mod, Expr::Kind::kScore);
  for (const ExprOp& op : e.ops())
    if (op.code == ExprCode::kVar && (op.var == kVarQLen || op.var == kVarKvLen))
      throw CaseError("/attention/score_mod",
                      "reads q_len or kv_len, which differ between the prefill (q_len = N) and its decode steps (q_len 1), so "
                      "their logits differ; the decode-vs-prefill check needs a score_mod of positions only");
}

// FP8 scales computed from the data depend on the data present: the prefill's (amax over its
// cache and its queries) are given to every derived case, so that every case stores the same bytes.
// Token scales are per key already and stay as they are.
void give_prefill_scales(CaseSpec* p) {
  if (!p->fp8_kv()) return;
  KvScalesSpec& s = p->kv_cache.scales;
  const bool kv_amax = s.granularity != ScaleGranularity::kToken && (s.k.empty() || s.v.empty());
  const bool q_amax = p->fp8_attention && !p->fp8_attention->q_scale;
  if (!kv_amax && !q_amax) return;
  const PageTable pt = make_page_table(*p);
  const int64_t bytes = workload_bytes(*p, pt);
  if (bytes > kMaxHostWorkloadBytes)
    throw CaseError("--last", "the prefill's inputs would need " + std::to_string(bytes >> 20) +
                                  " MiB on the host to compute its FP8 scales (limit " +
                                  std::to_string(kMaxHostWorkloadBytes >> 20) + " MiB); give /kv_cache/scales k and v");
  const Workload w = make_workload(*p, pt);
  if (kv_amax) {
    s.k.assign(w.k_scale.begin(), w.k_scale.end());
    s.v.assign(w.v_scale.begin(), w.v_scale.end());
  }
  if (q_amax) p->fp8_attention->q_scale = w.q_scale;
}

// Request r's mask in case cs, its mask_mod's bits included (kept in *store).
RowMask full_mask(const CaseSpec& cs, int r, const Expr* mask_mod, MaskBits* store) {
  RowMask m = row_mask(cs, r);
  if (mask_mod) {
    *store = make_mask_bits(cs, r, m, *mask_mod);
    m.bits = store->bits.data();
    m.bounds = store->bounds.data();
    m.words = store->words;
  }
  return m;
}

// Every decode step's query must see exactly the keys the prefill's same query sees: otherwise the
// two computations are of different things and a difference says nothing about a kernel.
void check_same_keys(const CaseSpec& c, const ConsistencyCases& dc) {
  const int n = dc.n;
  std::optional<Expr> mm;
  if (c.attention.mask_mod) mm = Expr::parse(*c.attention.mask_mod, Expr::Kind::kMask);
  const Expr* mask_mod = mm ? &*mm : nullptr;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    MaskBits pb;
    const RowMask mp = full_mask(dc.prefill, r, mask_mod, &pb);
    const int L = c.requests[r].kv_len;
    for (int i = 0; i < n; ++i) {
      const int qa = L - n + i, kv = qa + 1;
      MaskBits sb;
      const RowMask ms = full_mask(dc.steps[i], r, mask_mod, &sb);
      int plo, phi, slo, shi;
      visible_range(mp, qa, &plo, &phi);
      visible_range(ms, qa, &slo, &shi);
      const bool same_range = (plo >= phi && slo >= shi) || (plo == slo && phi == shi);
      if (same_range && !mask_mod) continue;
      int bad = -1;
      for (int k = std::min(plo, slo); k < std::max(phi, shi) && bad < 0; ++k)
        if (allowed(mp, qa, k) != (k < kv && allowed(ms, qa, k))) bad = k;
      if (bad < 0) continue;
      const bool prefill_sees = allowed(mp, qa, bad);
      const std::string where =
          "request " + std::to_string(r) + ", query " + std::to_string(i) + " of the last " + std::to_string(n) + " (position " +
          std::to_string(qa) + "): the prefill " + (prefill_sees ? "sees" : "does not see") + " key " + std::to_string(bad) +
          ", decode step " + std::to_string(i) + " (kv_len " + std::to_string(kv) + ") " + (prefill_sees ? "does not" : "does");
      if (!c.attention.causal)
        throw CaseError("/attention/causal",
                        "false: " + where +
                            "; without a causal mask a prefill query sees keys after its own position, which its decode step, "
                            "whose cache ends at that position, does not have: the decode-vs-prefill check needs a causal mask");
      if (mask_mod)
        throw CaseError("/attention/mask_mod", where + "; the check needs a mask under which a query sees the same keys in both");
      throw CaseError("--last", where + "; the check needs a mask under which a query sees the same keys in both");
    }
  }
}

}  // namespace

ConsistencyCases consistency_cases(const CaseSpec& c, int n) {
  validate_case(c, &registry_ids());
  const int R = static_cast<int>(c.requests.size());
  int min_kv = INT_MAX, min_r = 0;
  for (int r = 0; r < R; ++r)
    if (c.requests[r].kv_len < min_kv) min_kv = c.requests[r].kv_len, min_r = r;
  if (n < 1)
    throw CaseError("--last", std::to_string(n) + " is not allowed, must be >= 1 (the number of last tokens of every request)");
  if (n > min_kv)
    throw CaseError("--last", std::to_string(n) + " is more than request " + std::to_string(min_r) + "'s kv_len " +
                                  std::to_string(min_kv) +
                                  ": the last N tokens of every request must exist, so N <= " + std::to_string(min_kv));
  check_score_mod(c);
  for (int r = 0; r < R; ++r) {
    const auto& rq = c.requests[r];
    const int first_kv = rq.kv_len - n + 1;
    if (rq.prefix_len && *rq.prefix_len > first_kv)
      throw CaseError(req_path(r, "prefix_len"),
                      std::to_string(*rq.prefix_len) + " is past the first decode step's cache (kv_len " +
                          std::to_string(first_kv) + " with --last " + std::to_string(n) +
                          "): the prefill's first query would see prefix keys its decode step does not have; use --last <= " +
                          std::to_string(rq.kv_len - *rq.prefix_len + 1));
  }
  ConsistencyCases dc;
  dc.n = n;
  CaseSpec base = c;
  base.comparisons.clear();
  base.sample_rows.reset();  // every row is compared
  for (int r = 0; r < R; ++r) base.requests[r].seed = c.request_seed(r);
  dc.prefill = base;
  dc.prefill.name = c.name + " (prefill of the last " + std::to_string(n) + ")";
  for (auto& rq : dc.prefill.requests) rq.q_len = n;
  try {  // the prefill's (q_len N) mask_mod pairs stay within the budget, as any case's
    validate_case(dc.prefill, &registry_ids());
  } catch (const CaseError& e) {
    throw CaseError("--last", "the prefill of the last " + std::to_string(n) + " tokens is not a valid case (" + e.path() + ": " +
                                  e.rule() + ")");
  }
  give_prefill_scales(&dc.prefill);
  dc.steps.reserve(n);
  for (int i = 0; i < n; ++i) {
    CaseSpec s = dc.prefill;
    s.name = c.name + " (decode step " + std::to_string(i) + " of " + std::to_string(n) + ")";
    for (int r = 0; r < R; ++r) {
      RequestSpec& rq = s.requests[r];
      const int kv = c.requests[r].kv_len - n + 1 + i;
      rq.q_len = 1;
      rq.kv_len = kv;
      rq.q_offset = c.requests[r].q_offset + i;  // step i's query is the prefill's query i
      // document starts past the step's cache do not change what its query sees
      rq.doc_starts.erase(std::remove_if(rq.doc_starts.begin(), rq.doc_starts.end(), [kv](int d) { return d >= kv; }),
                          rq.doc_starts.end());
      if (rq.pad_start && *rq.pad_start > kv) rq.pad_start.reset();  // every key of the step is before it
    }
    try {
      validate_case(s, &registry_ids());
    } catch (const CaseError& e) {
      throw CaseError("--last", "decode step " + std::to_string(i) + " is not a valid case (" + e.path() + ": " + e.rule() + ")");
    }
    dc.steps.push_back(std::move(s));
  }
  check_same_keys(c, dc);
  return dc;
}

const char* verdict_name(ConsistencyVerdict v) {
  switch (v) {
    case ConsistencyVerdict::kBitIdentical:
      return "bit-identical";
    case ConsistencyVerdict::kDiffers:
      return "differs";
    case ConsistencyVerdict::kFailed:
      return "FAILED";
    case ConsistencyVerdict::kNotRun:
      return "not run";
  }
  return "?";
}

int64_t BackendConsistency::identical_rows() const {
  int64_t s = 0;
  for (int64_t x : rows_identical) s += x;
  return s;
}

int64_t BackendConsistency::nonfinite_total() const {
  int64_t s = 0;
  for (int64_t x : nonfinite) s += x;
  return s;
}

std::string BackendConsistency::verdict_text() const {
  char b[64];
  switch (verdict) {
    case ConsistencyVerdict::kBitIdentical:
      return "bit-identical";
    case ConsistencyVerdict::kDiffers:
    case ConsistencyVerdict::kFailed: {
      std::snprintf(b, sizeof b, "%.3g", max_diff);
      std::string t = std::string(verdict == ConsistencyVerdict::kFailed ? "FAILED: " : "") + "differs from position " +
                      std::to_string(first_diff) + " (request " + std::to_string(first_request) + ", key " +
                      std::to_string(first_key) + "), max |diff| " + b;
      if (max_diff_position >= 0) t += " at position " + std::to_string(max_diff_position);
      if (const int64_t nf = nonfinite_total()) t += ", " + std::to_string(nf) + " NaN/Inf mismatches";
      if (first_key_by_request.size() > 1) {
        t += "; first differing key per request: ";
        for (size_t r = 0; r < first_key_by_request.size(); ++r)
          t += (r ? ", " : "") + (first_key_by_request[r] < 0 ? std::string("none") : std::to_string(first_key_by_request[r]));
      }
      return t;
    }
    case ConsistencyVerdict::kNotRun: {
      const std::string st = status == Status::kNotCompiled ? "not compiled"
                             : status == Status::kNoDevice  ? "no CUDA device"
                                                            : std::string(status_name(status));
      // the message often starts with the same words ("no CUDA device: ..."): said once
      const std::string why = reason.rfind(st, 0) == 0 ? reason : reason.empty() ? st : st + ": " + reason;
      return why + " (" + run + ")";
    }
  }
  return "";
}

int ConsistencyReport::exit_code() const {
  bool not_run = cancelled;
  for (const auto& b : backends) {
    if (b.verdict == ConsistencyVerdict::kFailed) return 1;
    if (b.verdict == ConsistencyVerdict::kNotRun && b.status == Status::kError) return 1;
    not_run |= b.verdict == ConsistencyVerdict::kNotRun;
  }
  return not_run ? 3 : 0;
}

std::string ConsistencyReport::summary_line() const {
  int ident = 0, differs = 0, failed = 0, not_run = 0;
  for (const auto& b : backends) {
    ident += b.verdict == ConsistencyVerdict::kBitIdentical;
    differs += b.verdict == ConsistencyVerdict::kDiffers;
    failed += b.verdict == ConsistencyVerdict::kFailed;
    not_run += b.verdict == ConsistencyVerdict::kNotRun;
  }
  const int code = exit_code();
  std::string s = code == 1 ? "FAILED: " : code == 3 ? "NOT CHECKED: " : "ok: ";
  s += std::to_string(ident) + " bit-identical, " + std::to_string(differs) + " differ";
  if (failed) s += ", " + std::to_string(failed) + " FAILED (differ where bit identity is promised)";
  if (not_run) s += ", " + std::to_string(not_run) + " not run";
  if (cancelled) s += " (cancelled)";
  return s;
}

namespace {

// Runs `ids` on one derived case, as a session does: one host workload for the CPU backends, GPU
// backends make their own device inputs.
std::vector<Result> run_case(const CaseSpec& cs, int step, const std::vector<std::string>& ids, const ConsistencyOptions& opt,
                             const std::string& stage, double f0, double f1) {
  std::vector<Result> out;
  const Plan p = plan_case(cs);
  bool need_host = false;
  for (const auto& id : ids) need_host |= !is_gpu_backend(id);
  const int64_t bytes = workload_bytes(cs, p.pages);
  const bool host_ok = bytes <= kMaxHostWorkloadBytes;
  Workload w;
  if (need_host && host_ok) w = make_workload(cs, p.pages);
  const ConsistencyRunFn run = opt.run ? opt.run
                                       : [](const std::string& id, int, const CaseSpec& c, const Plan& p, const Workload& w,
                                            const RunOptions& ro) { return run_one(id, c, p, w, ro); };
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string& id = ids[k];
    Result r;
    r.backend = id;
    const double fa = f0 + (f1 - f0) * k / ids.size(), fb = f0 + (f1 - f0) * (k + 1) / ids.size();
    if (opt.cancel && opt.cancel->load()) {
      r.status = Status::kCancelled;
      r.message = "cancelled";
    } else if (!is_gpu_backend(id) && !host_ok) {
      r.status = Status::kUnsupported;
      r.message = "host inputs would need " + std::to_string(bytes >> 20) + " MiB, more than the " +
                  std::to_string(kMaxHostWorkloadBytes >> 20) + " MiB CPU limit";
    } else {
      RunOptions ro;
      ro.cancel = opt.cancel;
      ro.threads = opt.threads;
      if (opt.progress) ro.progress = [&, id](double x) { opt.progress(stage + ": " + id, fa + (fb - fa) * x); };
      if (opt.progress) opt.progress(stage + ": " + id, fa);
      r = run(id, step, cs, p, w, ro);
    }
    out.push_back(std::move(r));
  }
  return out;
}

void mark_not_run(BackendConsistency* b, const Result& r, const std::string& run) {
  b->verdict = ConsistencyVerdict::kNotRun;
  b->status = r.ok() ? Status::kError : r.status;
  b->reason = r.ok() ? "returned no output" : r.message;
  b->run = run;
}

// O of the prefill's query i against O of decode step i, every request and qo head.
void compare_step(const CaseSpec& c, int n, int i, const Result& pre, const Result& step, BackendConsistency* b) {
  const int R = static_cast<int>(c.requests.size()), Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  for (int r = 0; r < R; ++r) {
    const int64_t tp = static_cast<int64_t>(r) * n + i, ts = r;
    if (!pre.row_ok(tp) || !step.row_ok(ts)) continue;
    for (int h = 0; h < Hq; ++h) {
      const float* a = pre.o.data() + (tp * Hq + h) * Dv;
      const float* s = step.o.data() + (ts * Hq + h) * Dv;
      bool same = true;
      for (int d = 0; d < Dv; ++d) {
        const float x = a[d], y = s[d];
        if (std::isfinite(x) && std::isfinite(y)) {
          b->max_abs[i] = std::max(b->max_abs[i], std::fabs(static_cast<double>(x) - y));
          same = same && dtype_bits(c.dtype, x) == dtype_bits(c.dtype, y);
        } else if (!(std::isinf(x) && std::isinf(y) && (x > 0) == (y > 0))) {  // equal infinities agree, NaN never
          ++b->nonfinite[i];
          same = false;
        }
      }
      b->rows_identical[i] += same;
      if (!same && b->first_key_by_request[r] < 0) b->first_key_by_request[r] = c.requests[r].kv_len - n + i;
      if (!same && b->first_diff < 0) {
        b->first_diff = i;
        b->first_request = r;
        b->first_key = c.requests[r].kv_len - n + i;
      }
    }
  }
}

void finish_verdict(BackendConsistency* b) {
  if (b->verdict == ConsistencyVerdict::kNotRun) {  // no number from a run that was not ok
    b->max_abs.clear();
    b->nonfinite.clear();
    b->rows_identical.clear();
    b->first_key_by_request.clear();
    b->first_diff = -1;
    return;
  }
  for (size_t i = 0; i < b->max_abs.size(); ++i)
    if (b->max_abs[i] > b->max_diff) b->max_diff = b->max_abs[i], b->max_diff_position = static_cast<int>(i);
  b->verdict = b->first_diff < 0  ? ConsistencyVerdict::kBitIdentical
               : b->promises_bits ? ConsistencyVerdict::kFailed
                                  : ConsistencyVerdict::kDiffers;
}

std::string kv_note(const CaseSpec& p) {
  if (!p.fp8_kv()) return "";
  const KvScalesSpec& s = p.kv_cache.scales;
  std::string t = std::string(fp8_name(*p.kv_cache.fp8)) + " KV cache, " + granularity_name(s.granularity) + " scales";
  if (s.granularity == ScaleGranularity::kToken)
    t += " (per key: the same in every derived case)";
  else
    t += " given to every derived case as the prefill's";
  if (p.fp8_attention) {
    char b[48];
    std::snprintf(b, sizeof b, "%.6g", *p.fp8_attention->q_scale);
    t += std::string("; FP8 attention, q_scale ") + b;
  }
  return t;
}

}  // namespace

std::pair<std::string, std::string> consistency_pair(const std::string& entry) {
  const size_t k = entry.find('>');
  if (k == std::string::npos) return {entry, entry};
  return {entry.substr(0, k), entry.substr(k + 1)};
}

ConsistencyReport check_consistency(const CaseSpec& c, int n, const ConsistencyOptions& opt) {
  const ConsistencyCases dc = consistency_cases(c, n);
  const std::vector<std::string> ids = opt.backends.empty() ? c.backends : opt.backends;
  // an entry "P>D" runs the prefill on P and the decode steps on D (an engine's two kernels)
  std::vector<std::string> pre_ids, dec_ids;
  for (const auto& e : ids) {
    pre_ids.push_back(consistency_pair(e).first);
    dec_ids.push_back(consistency_pair(e).second);
  }
  ConsistencyReport rep;
  rep.case_name = c.name;
  rep.n = n;
  for (const auto& rq : c.requests) rep.kv_lens.push_back(rq.kv_len);
  rep.num_qo_heads = c.num_qo_heads;
  rep.head_dim_vo = c.head_dim_vo;
  rep.dtype = dtype_name(c.dtype);
  rep.kv_note = kv_note(dc.prefill);
  for (const auto& id : ids) {
    BackendConsistency b;
    b.backend = id;
    const auto [pre_id, dec_id] = consistency_pair(id);
    const BackendInfo* info = backend_info(pre_id);
    // the CPU reference and low-precision baseline compute each row on its own, whatever the batch
    b.promises_bits = pre_id == dec_id && info && !info->gpu && (info->role == Role::kReference || info->role == Role::kLowp);
    b.verdict = ConsistencyVerdict::kBitIdentical;  // until a run says otherwise
    b.max_abs.assign(n, 0.0);
    b.nonfinite.assign(n, 0);
    b.rows_identical.assign(n, 0);
    b.first_key_by_request.assign(c.requests.size(), -1);
    b.rows_per_position = static_cast<int64_t>(c.requests.size()) * c.num_qo_heads;
    rep.backends.push_back(std::move(b));
  }
  const double total = n + 1;
  const std::vector<Result> pre = run_case(dc.prefill, -1, pre_ids, opt, "prefill", 0, 1 / total);
  for (size_t k = 0; k < ids.size(); ++k)
    if (!pre[k].ok() || pre[k].o.empty()) mark_not_run(&rep.backends[k], pre[k], "prefill");
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> live;  // backends still running: one not ok is not run again
    std::vector<size_t> at;
    for (size_t k = 0; k < ids.size(); ++k)
      if (rep.backends[k].verdict != ConsistencyVerdict::kNotRun) live.push_back(dec_ids[k]), at.push_back(k);
    if (live.empty()) break;
    const std::string stage = "decode step " + std::to_string(i + 1) + " of " + std::to_string(n);
    const std::vector<Result> res = run_case(dc.steps[i], i, live, opt, stage, (i + 1) / total, (i + 2) / total);
    for (size_t j = 0; j < live.size(); ++j) {
      BackendConsistency& b = rep.backends[at[j]];
      if (!res[j].ok() || res[j].o.empty())
        mark_not_run(&b, res[j], "decode step " + std::to_string(i));
      else
        compare_step(c, n, i, pre[at[j]], res[j], &b);
    }
  }
  for (auto& b : rep.backends) {
    rep.cancelled |= b.status == Status::kCancelled;
    finish_verdict(&b);
  }
  if (opt.progress) opt.progress("done", 1);
  return rep;
}

}  // namespace attnscope
