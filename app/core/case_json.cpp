// Strict reader and canonical writer of the case format.
#include "case_json.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>

#include "attnscope/fp8.h"
#include "attnscope/mask_expr.h"
#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "attnscope/sparse.h"
#include "json_strict.h"
#include "recorded_json.h"

namespace attnscope {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::string show(const json& v) {
  std::string s = v.dump();  // control characters come out escaped
  if (s.size() > 40) {
    size_t cut = 37;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    s = s.substr(0, cut) + "...";
  }
  return s;
}

// One JSON object being read: knows its path and which keys it allows.
class Obj {
 public:
  Obj(const json& j, std::string path, std::initializer_list<const char*> keys) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) throw CaseError(where(), "must be an object, got " + json_kind(j));
    std::set<std::string> known(keys.begin(), keys.end());
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!known.count(it.key())) {
        std::string list;
        for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        throw CaseError(path_ + "/" + printable(it.key()), "unknown key, allowed here: " + list);
      }
    }
  }
  std::string where() const { return path_.empty() ? "/" : path_; }
  std::string at(const char* k) const { return path_ + "/" + k; }
  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  const json& raw(const char* k) const { return j_[k]; }
  void require(const char* k) const {
    if (!has(k)) throw CaseError(at(k), "missing, it is required");
  }

  static int64_t integer(const json& v, const std::string& path, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) throw CaseError(path, "must be an integer, got " + json_kind(v) + " " + show(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw CaseError(path, show(v) + " is out of range, must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      throw CaseError(path, show(v) + " is out of range, must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  int get_int(const char* k, int def, int64_t lo = std::numeric_limits<int>::min(),
              int64_t hi = std::numeric_limits<int>::max()) const {
    return has(k) ? static_cast<int>(integer(j_[k], at(k), lo, hi)) : def;
  }
  std::optional<int> opt_int(const char* k, int64_t lo = std::numeric_limits<int>::min(),
                             int64_t hi = std::numeric_limits<int>::max()) const {
    if (!has(k)) return std::nullopt;
    return static_cast<int>(integer(j_[k], at(k), lo, hi));
  }
  std::optional<uint64_t> opt_u64(const char* k) const {
    if (!has(k)) return std::nullopt;
    const json& v = j_[k];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      throw CaseError(at(k), "must be a non-negative integer (a seed), got " + json_kind(v) + " " + show(v));
    return v.get<uint64_t>();
  }
  bool get_bool(const char* k, bool def) const {
    if (!has(k)) return def;
    if (!j_[k].is_boolean()) throw CaseError(at(k), "must be true or false, got " + json_kind(j_[k]) + " " + show(j_[k]));
    return j_[k].get<bool>();
  }
  std::optional<double> opt_num(const char* k) const {
    if (!has(k)) return std::nullopt;
    if (!j_[k].is_number()) throw CaseError(at(k), "must be a number, got " + json_kind(j_[k]) + " " + show(j_[k]));
    return j_[k].get<double>();
  }
  double get_num(const char* k, double def) const { return opt_num(k).value_or(def); }
  std::string get_str(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    if (!j_[k].is_string()) throw CaseError(at(k), "must be a string, got " + json_kind(j_[k]) + " " + show(j_[k]));
    return j_[k].get<std::string>();
  }
  template <class E>
  E get_enum(const char* k, E def, std::initializer_list<std::pair<const char*, E>> names) const {
    if (!has(k)) return def;
    const std::string s = get_str(k, "");
    std::string list;
    for (const auto& [n, e] : names) {
      if (s == n) return e;
      list += (list.empty() ? "\"" : ", \"") + std::string(n) + "\"";
    }
    throw CaseError(at(k), "\"" + printable(s) + "\" is not allowed, must be one of " + list);
  }
  const json& array(const char* k) const {
    if (!j_[k].is_array()) throw CaseError(at(k), "must be an array, got " + json_kind(j_[k]));
    return j_[k];
  }

 private:
  const json& j_;
  std::string path_;
};

const std::initializer_list<std::pair<const char*, DType>> kDtypes = {
    {"fp32", DType::kFp32}, {"fp16", DType::kFp16}, {"bf16", DType::kBf16}};

// "amax" (empty: computed from the data), a number, or an array of numbers.
std::vector<double> read_scale_values(const Obj& o, const char* key) {
  if (!o.has(key)) return {};
  const json& v = o.raw(key);
  const std::string path = o.at(key);
  if (v.is_string()) {
    if (v.get<std::string>() != "amax")
      throw CaseError(
          path, "\"" + printable(v.get<std::string>()) + "\" is not allowed, write \"amax\", a number or an array of numbers");
    return {};
  }
  if (v.is_number()) return {v.get<double>()};
  if (!v.is_array() || v.empty())
    throw CaseError(path, "must be \"amax\", a number or a non-empty array of numbers, got " + json_kind(v) + " " + show(v));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number())
      throw CaseError(path + "/" + std::to_string(i), "must be a number, got " + json_kind(v[i]) + " " + show(v[i]));
    out.push_back(v[i].get<double>());
  }
  return out;
}

// /attention/sinks: true (seeded) or an array of numbers (one per query head: validate_case's rule).
std::optional<SinksSpec> read_sinks(const Obj& a) {
  if (!a.has("sinks")) return std::nullopt;
  const json& v = a.raw("sinks");
  const std::string path = a.at("sinks");
  if (v.is_boolean()) return v.get<bool>() ? std::optional<SinksSpec>(SinksSpec{}) : std::nullopt;
  if (!v.is_array() || v.empty())
    throw CaseError(path,
                    "must be true (logits drawn from the seed), false or a non-empty array of numbers (one per query "
                    "head), got " +
                        json_kind(v) + " " + show(v));
  SinksSpec s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number())
      throw CaseError(path + "/" + std::to_string(i), "must be a number, got " + json_kind(v[i]) + " " + show(v[i]));
    s.logits.push_back(v[i].get<double>());
  }
  return s;
}

// /kv_cache/dtype and /kv_cache/scales (the FP8 rules are validate_fp8's).
void read_kv_dtype(const Obj& k, CaseSpec& c) {
  auto& kc = c.kv_cache;
  if (k.has("dtype")) {
    const std::string d = k.get_str("dtype", "");
    if (d == "fp8_e4m3")
      kc.fp8 = Fp8Format::kE4M3;
    else if (d == "fp8_e5m2")
      kc.fp8 = Fp8Format::kE5M2;
    else if (d != dtype_name(c.dtype))
      throw CaseError(k.at("dtype"), "\"" + printable(d) +
                                         "\" is not allowed, must be \"fp8_e4m3\", \"fp8_e5m2\" or the case's /dtype \"" +
                                         dtype_name(c.dtype) + "\"");
  }
  if (!k.has("scales")) return;
  Obj sc(k.raw("scales"), "/kv_cache/scales", {"granularity", "k", "v"});
  if (!kc.fp8) throw CaseError("/kv_cache/scales", "set without an FP8 /kv_cache/dtype (fp8_e4m3 or fp8_e5m2)");
  kc.scales.granularity = sc.get_enum(
      "granularity", ScaleGranularity::kTensor,
      {{"tensor", ScaleGranularity::kTensor}, {"head", ScaleGranularity::kHead}, {"token", ScaleGranularity::kToken}});
  kc.scales.k = read_scale_values(sc, "k");
  kc.scales.v = read_scale_values(sc, "v");
}

RequestSpec parse_request(const json& j, const std::string& path) {
  Obj o(j, path, {"q_len", "kv_len", "prefix_len", "doc_starts", "pad_start", "seed", "q_offset", "tree_parents"});
  o.require("q_len");
  o.require("kv_len");
  RequestSpec r;
  r.q_len = o.get_int("q_len", 0);
  r.kv_len = o.get_int("kv_len", 0);
  r.prefix_len = o.opt_int("prefix_len");
  r.pad_start = o.opt_int("pad_start");
  r.seed = o.opt_u64("seed");
  r.q_offset = o.get_int("q_offset", 0, 0, kMaxTokens);
  if (o.has("doc_starts")) {
    const json& a = o.array("doc_starts");
    if (a.empty()) throw CaseError(o.at("doc_starts"), "is empty, list at least the start 0 (or leave the key out)");
    for (size_t i = 0; i < a.size(); ++i)
      r.doc_starts.push_back(
          static_cast<int>(Obj::integer(a[i], o.at("doc_starts") + "/" + std::to_string(i), 0, std::numeric_limits<int>::max())));
  }
  if (o.has("tree_parents")) {  // the rules (length, -1 or an earlier token) are validate_case's
    const json& a = o.array("tree_parents");
    if (a.empty()) throw CaseError(o.at("tree_parents"), "is empty, give one parent per new token (or leave the key out)");
    for (size_t i = 0; i < a.size(); ++i)
      r.tree_parents.push_back(static_cast<int>(Obj::integer(a[i], o.at("tree_parents") + "/" + std::to_string(i),
                                                             std::numeric_limits<int>::min(), std::numeric_limits<int>::max())));
  }
  return r;
}

// /mla, /heads and /head_dim: /mla first, since it sets the KV heads and head dims the others may leave out.
void read_shape(const Obj& top, CaseSpec& c) {
  if (top.has("mla")) {  // read first: it sets the KV heads and head dims the keys below may leave out
    Obj m(top.raw("mla"), "/mla", {"kv_lora_rank", "rope_dim", "absorbed", "qk_nope_dim", "v_head_dim"});
    MlaSpec ml;
    ml.kv_lora_rank = m.get_int("kv_lora_rank", ml.kv_lora_rank);
    ml.rope_dim = m.get_int("rope_dim", ml.rope_dim);
    ml.absorbed = m.get_bool("absorbed", ml.absorbed);
    ml.qk_nope_dim = m.get_int("qk_nope_dim", ml.qk_nope_dim);
    ml.v_head_dim = m.get_int("v_head_dim", ml.v_head_dim);
    c.mla = ml;
  }
  top.require("heads");
  {
    Obj h(top.raw("heads"), "/heads", {"qo", "kv"});
    h.require("qo");
    if (!c.mla) h.require("kv");
    c.num_qo_heads = h.get_int("qo", 0);
    c.num_kv_heads = h.get_int("kv", c.mla && !c.mla->absorbed ? c.num_qo_heads : 1);
  }
  if (!c.mla) top.require("head_dim");
  if (!top.has("head_dim")) {
    c.head_dim_qk = c.mla->qk_dim();
    c.head_dim_vo = c.mla->vo_dim();
  } else {
    const json& hd = top.raw("head_dim");
    if (hd.is_number_integer()) {  // a single number sets qk and vo alike
      c.head_dim_qk = c.head_dim_vo =
          static_cast<int>(Obj::integer(hd, "/head_dim", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    } else {
      Obj h(hd, "/head_dim", {"qk", "vo"});
      h.require("qk");
      c.head_dim_qk = h.get_int("qk", 0);
      c.head_dim_vo = h.get_int("vo", c.head_dim_qk);
    }
  }
}

// /sparse (DeepSeek Sparse Attention): the indexer's shape and scoring, or the selection given as an
// engine's buffer (the rules on its values are validate_sparse's; here only its JSON shape).
void read_sparse(const Obj& top, CaseSpec& c) {
  if (!top.has("sparse")) return;
  Obj o(top.raw("sparse"), "/sparse", {"top_k", "index_heads", "index_head_dim", "scoring", "indices"});
  SparseSpec s;
  s.top_k = o.get_int("top_k", s.top_k);
  s.index_heads = o.get_int("index_heads", s.index_heads);
  s.index_head_dim = o.get_int("index_head_dim", s.index_head_dim);
  s.scoring = o.get_enum("scoring", s.scoring, {{"fp8", SparseScoring::kFp8}, {"fp64", SparseScoring::kFp64}});
  if (o.has("indices")) {
    const json& reqs = o.array("indices");
    if (reqs.empty()) throw CaseError(o.at("indices"), "is empty, give one list of rows per request (or leave the key out)");
    for (size_t r = 0; r < reqs.size(); ++r) {
      const std::string pr = o.at("indices") + "/" + std::to_string(r);
      if (!reqs[r].is_array()) throw CaseError(pr, "must be an array (one row per query token), got " + json_kind(reqs[r]));
      s.indices.emplace_back();
      for (size_t q = 0; q < reqs[r].size(); ++q) {
        const json& row = reqs[r][q];
        const std::string pq = pr + "/" + std::to_string(q);
        if (!row.is_array()) throw CaseError(pq, "must be an array of token indices (-1: padding), got " + json_kind(row));
        std::vector<int> v;
        for (size_t j = 0; j < row.size(); ++j)
          v.push_back(static_cast<int>(Obj::integer(row[j], pq + "/" + std::to_string(j), std::numeric_limits<int>::min(),
                                                    std::numeric_limits<int>::max())));
        s.indices.back().push_back(std::move(v));
      }
    }
  }
  c.sparse = s;
}

// /cuda_graph (docs/case-format.md): the bucket a graph was captured at and whose padding replays it.
void read_cuda_graph(const Obj& top, CaseSpec& c) {
  if (!top.has("cuda_graph")) return;
  Obj g(top.raw("cuda_graph"), "/cuda_graph", {"bucket", "engine"});
  g.require("bucket");
  CudaGraphSpec cg;
  cg.bucket = g.get_int("bucket", 1);
  // absent: derived from /engine, the one source (validate_case refuses the two disagreeing)
  cg.engine = g.get_enum("engine", graph_engine_for(c.engine), {{"sglang", GraphEngine::kSglang}, {"vllm", GraphEngine::kVllm}});
  c.cuda_graph = cg;
}

// /parallel (docs/partitions.md): one of context / cascade, and the base the merge reads LSE in.
void read_parallel(const Obj& top, CaseSpec& c) {
  if (!top.has("parallel")) return;
  Obj p(top.raw("parallel"), "/parallel", {"context", "cascade", "merge_base"});
  ParallelSpec ps;
  if (p.has("context")) {
    Obj x(p.raw("context"), "/parallel/context", {"ranks", "interleave"});
    x.require("ranks");
    ps.context = ContextParallelSpec{x.get_int("ranks", 2), x.get_int("interleave", 1)};
  }
  if (p.has("cascade")) {
    Obj x(p.raw("cascade"), "/parallel/cascade", {"shared_prefix"});
    x.require("shared_prefix");
    ps.cascade = CascadeSpec{x.get_int("shared_prefix", 0)};
  }
  // "e" / "2" for every backend, or {"<backend id>": "e" | "2", ...}
  if (p.has("merge_base") && p.raw("merge_base").is_object()) {
    const json& m = p.raw("merge_base");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string() || (it.value() != "e" && it.value() != "2"))
        throw CaseError("/parallel/merge_base/" + it.key(), "must be \"e\" or \"2\"");
      ps.merge_base[it.key()] = it.value() == "2" ? LseBase::k2 : LseBase::kE;
    }
  } else if (p.has("merge_base")) {
    ps.merge_base[""] = p.get_enum("merge_base", LseBase::kE, {{"e", LseBase::kE}, {"2", LseBase::k2}});
  }
  c.parallel = ps;
}

}  // namespace

CaseFile parse_case(const json& j) {
  Obj top(j, "", {"schema",    "name",      "description", "requests",   "heads",  "head_dim",      "mla",      "dtype",
                  "kv_cache",  "attention", "split",       "cuda_graph", "data",   "fp8_attention", "backends", "comparisons",
                  "reference", "kernels",   "environment", "recorded",   "engine", "parallel",      "sparse"});
  top.require("schema");
  const std::string schema = top.get_str("schema", "");
  if (schema != kCaseSchema) throw CaseError("/schema", "\"" + schema + "\" is not supported, must be \"" + kCaseSchema + "\"");

  CaseFile f;
  CaseSpec& c = f.spec;
  c.name = top.get_str("name", "");
  c.description = top.get_str("description", "");
  c.engine = top.get_str("engine", "");

  top.require("requests");
  const json& reqs = top.array("requests");
  if (reqs.size() > kMaxRequests)  // before reading any: a value built in code has not met the reader's limit
    throw CaseError("/requests/" + std::to_string(kMaxRequests),
                    "one past the limit: at most " + std::to_string(kMaxRequests) + " requests are allowed");
  for (size_t i = 0; i < reqs.size(); ++i) c.requests.push_back(parse_request(reqs[i], "/requests/" + std::to_string(i)));

  read_shape(top, c);
  read_sparse(top, c);
  top.require("dtype");
  c.dtype = top.get_enum("dtype", DType::kBf16, kDtypes);

  if (top.has("kv_cache")) {
    Obj k(top.raw("kv_cache"), "/kv_cache",
          {"storage", "page_size", "layout", "allocation", "allocation_seed", "null_page", "poison_unused",
           "max_num_blocks_per_seq", "dtype", "scales"});
    auto& kc = c.kv_cache;
    kc.storage = k.get_enum("storage", KvStorage::kPaged, {{"paged", KvStorage::kPaged}, {"ragged", KvStorage::kRagged}});
    const bool ragged = kc.storage == KvStorage::kRagged;
    kc.page_size = k.get_int("page_size", ragged ? 1 : 16);
    kc.layout = k.get_enum("layout", KvLayout::kNHD, {{"NHD", KvLayout::kNHD}, {"HND", KvLayout::kHND}});
    kc.allocation = k.get_enum(
        "allocation", PageAlloc::kContiguous,
        {{"contiguous", PageAlloc::kContiguous}, {"shuffled", PageAlloc::kShuffled}, {"fragmented", PageAlloc::kFragmented}});
    kc.allocation_seed = k.opt_u64("allocation_seed").value_or(0);
    kc.null_page = k.get_bool("null_page", !ragged);
    kc.poison_unused = k.get_bool("poison_unused", false);
    kc.max_num_blocks_per_seq = k.opt_int("max_num_blocks_per_seq");
    read_kv_dtype(k, c);
  }
  if (top.has("fp8_attention")) {
    Obj f(top.raw("fp8_attention"), "/fp8_attention", {"q_scale"});
    Fp8AttentionSpec fa;
    const auto q = read_scale_values(f, "q_scale");
    if (q.size() > 1) throw CaseError(f.at("q_scale"), "Q has one scale, give one number or \"amax\"");
    if (!q.empty()) fa.q_scale = q[0];
    c.fp8_attention = fa;
  }
  if (top.has("attention")) {
    Obj a(top.raw("attention"), "/attention",
          {"causal", "window", "local_chunk", "prefix_lm", "soft_cap", "sm_scale", "alibi", "mask_mod", "score_mod", "sinks"});
    auto& at = c.attention;
    at.causal = a.get_bool("causal", true);
    at.window = a.opt_int("window");
    at.local_chunk = a.opt_int("local_chunk");
    at.prefix_lm = a.get_bool("prefix_lm", false);
    at.soft_cap = a.opt_num("soft_cap");
    at.sm_scale = a.opt_num("sm_scale");
    at.alibi = a.get_bool("alibi", false);
    if (a.has("mask_mod")) at.mask_mod = a.get_str("mask_mod", "");
    if (a.has("score_mod")) at.score_mod = a.get_str("score_mod", "");
    at.sinks = read_sinks(a);
  }
  if (top.has("split")) {
    Obj s(top.raw("split"), "/split", {"planner", "fixed_split_size", "fixed_tile_q", "num_sms", "cuda_graph", "partials"});
    auto& sp = c.split;
    sp.planner = s.get_enum("planner", Planner::kFlashInfer,
                            {{"flashinfer", Planner::kFlashInfer},
                             {"flash_attn", Planner::kFlashAttn},
                             {"fixed", Planner::kFixed},
                             {"off", Planner::kOff}});
    sp.fixed_split_size = s.opt_int("fixed_split_size");
    sp.fixed_tile_q = s.opt_int("fixed_tile_q");
    sp.num_sms = s.get_int("num_sms", 132);
    sp.cuda_graph = s.get_bool("cuda_graph", false);
    sp.partials =
        s.get_enum("partials", PartialPrecision::kFp32, {{"fp32", PartialPrecision::kFp32}, {"dtype", PartialPrecision::kDtype}});
  }
  read_cuda_graph(top, c);
  read_parallel(top, c);
  if (top.has("data")) {
    Obj d(top.raw("data"), "/data", {"seed", "mean", "std", "outliers"});
    c.data.seed = d.opt_u64("seed").value_or(1);
    c.data.mean = d.get_num("mean", 0.0);
    c.data.std = d.get_num("std", 1.0);
    if (d.has("outliers")) {
      Obj ol(d.raw("outliers"), "/data/outliers", {"channels", "scale"});
      ol.require("channels");
      ol.require("scale");
      const json& ch = ol.array("channels");
      for (size_t i = 0; i < ch.size(); ++i)
        c.data.outlier_channels.push_back(
            static_cast<int>(Obj::integer(ch[i], "/data/outliers/channels/" + std::to_string(i), std::numeric_limits<int>::min(),
                                          std::numeric_limits<int>::max())));
      c.data.outlier_scale = ol.get_num("scale", 1.0);
    }
  }
  if (top.has("backends")) {
    const json& b = top.array("backends");
    for (size_t i = 0; i < b.size(); ++i) {
      if (!b[i].is_string())
        throw CaseError("/backends/" + std::to_string(i), "must be a string (a backend id), got " + json_kind(b[i]));
      c.backends.push_back(b[i].get<std::string>());
    }
  } else {
    // the registry's reference, low-precision baseline and plan twin (the cpu family's)
    for (Role r : {Role::kReference, Role::kLowp, Role::kPlanTwin}) c.backends.push_back(backend_for_role(r));
  }
  if (top.has("comparisons")) {
    const json& cs = top.array("comparisons");
    for (size_t i = 0; i < cs.size(); ++i) {
      const std::string p = "/comparisons/" + std::to_string(i);
      Obj k(cs[i], p, {"backend", "baseline", "rule", "rtol", "atol", "lowp"});
      k.require("backend");
      k.require("baseline");
      ComparisonSpec cmp;
      cmp.backend = k.get_str("backend", "");
      cmp.baseline = k.get_str("baseline", "");
      cmp.rule = k.get_enum("rule", CompareRule::kAllclose,
                            {{"allclose", CompareRule::kAllclose},
                             {"twice_lowp", CompareRule::kTwiceLowp},
                             {"bitwise", CompareRule::kBitwise},
                             {"max_abs", CompareRule::kMaxAbs}});
      // defaults: allclose at vLLM's looser tolerance; twice_lowp's floor is a rounding allowance
      cmp.rtol = k.get_num("rtol", 1e-2);
      cmp.atol = k.get_num("atol", cmp.rule == CompareRule::kTwiceLowp ? 1e-5 : 1e-3);
      cmp.lowp = k.get_str("lowp", backend_for_role(Role::kLowp));
      c.comparisons.push_back(cmp);
    }
  }
  if (top.has("reference")) {
    Obj r(top.raw("reference"), "/reference", {"sample_rows"});
    c.sample_rows = r.opt_int("sample_rows");
  }
  if (top.has("kernels")) {
    Obj k(top.raw("kernels"), "/kernels", {"pad_head_dim_to"});
    c.pad_head_dim_to = k.opt_int("pad_head_dim_to");
  }
  if (top.has("environment")) {
    if (!top.raw("environment").is_object())
      throw CaseError("/environment", "must be an object, got " + json_kind(top.raw("environment")));
    validate_environment(top.raw("environment"));
    f.environment = top.raw("environment");
  }
  if (top.has("recorded")) {
    if (!top.raw("recorded").is_object())
      throw CaseError("/recorded", "must be an object, got " + json_kind(top.raw("recorded")));
    validate_recorded(top.raw("recorded"));
    f.recorded = top.raw("recorded");
  }
  validate_case(c, &registry_ids());
  return f;
}

CaseFile parse_case_text(const std::string& text) {
  json j;
  try {
    // a duplicate key is a CaseError naming its object; an array past its limit stops the read
    j = parse_json_strict(text, {{"/requests", kMaxRequests, "requests"},
                                 {"/requests/*/doc_starts", kMaxTokens, "document starts (each a key position)"},
                                 {"/requests/*/tree_parents", kMaxTokens, "tree parents (one per new token)"},
                                 {"/sparse/indices", kMaxRequests, "lists of rows (one per request)"},
                                 {"/sparse/indices/*", kMaxTokens, "rows (one per query token)"},
                                 {"/sparse/indices/*/*", kMaxTokens, "token indices"}});
  } catch (const json::parse_error& e) {
    // byte offset -> line and column
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string msg = e.what();
    const auto pos = msg.find("syntax error");
    if (pos != std::string::npos) msg = msg.substr(pos);
    throw CaseError("/", "not valid JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg);
  }
  return parse_case(j);
}

CaseFile read_case_file(const std::string& path) {
  // Only regular files, named as the file they are (the error's path is the file's, not a JSON
  // path): a FIFO would block the open, /dev/zero would never end, a directory gives a JSON error.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  const std::string name = printable(path);
  if (st.type() == std::filesystem::file_type::not_found) throw CaseError(name, "no such file");
  if (std::filesystem::is_directory(st)) throw CaseError(name, "is a directory, not a case file");
  if (!ec && !std::filesystem::is_regular_file(st)) throw CaseError(name, "not a regular file (a case is a JSON file)");
  const uintmax_t size = ec ? 0 : std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CaseError(name, std::string("cannot read it: ") + std::strerror(errno));
  // one byte more than the size says: a file that grew since is still caught by the limit
  std::string text(std::min<uintmax_t>(ec ? 0 : size, kMaxCaseBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (size > kMaxCaseBytes || text.size() > kMaxCaseBytes)
    throw CaseError(name, "larger than " + std::to_string(kMaxCaseBytes >> 20) + " MiB, the most a case file may be");
  return parse_case_text(text);
}

ordered_json case_to_json(const CaseSpec& c) {
  auto opt = [](const auto& v) -> ordered_json { return v ? ordered_json(*v) : ordered_json(nullptr); };
  ordered_json j;
  j["schema"] = kCaseSchema;
  j["name"] = c.name;
  j["description"] = c.description;
  if (!c.engine.empty()) j["engine"] = c.engine;  // written only when set: other cases' text is unchanged
  ordered_json reqs = ordered_json::array();
  for (const auto& r : c.requests) {
    ordered_json q;
    q["q_len"] = r.q_len;
    q["kv_len"] = r.kv_len;
    if (r.prefix_len) q["prefix_len"] = *r.prefix_len;
    if (!r.doc_starts.empty()) q["doc_starts"] = r.doc_starts;
    if (r.pad_start) q["pad_start"] = *r.pad_start;
    if (r.seed) q["seed"] = *r.seed;
    if (r.q_offset) q["q_offset"] = r.q_offset;
    if (!r.tree_parents.empty()) q["tree_parents"] = r.tree_parents;
    reqs.push_back(q);
  }
  j["requests"] = reqs;
  j["heads"] = {{"qo", c.num_qo_heads}, {"kv", c.num_kv_heads}};
  j["head_dim"] = {{"qk", c.head_dim_qk}, {"vo", c.head_dim_vo}};
  if (c.mla)
    j["mla"] = {{"kv_lora_rank", c.mla->kv_lora_rank},
                {"rope_dim", c.mla->rope_dim},
                {"absorbed", c.mla->absorbed},
                {"qk_nope_dim", c.mla->qk_nope_dim},
                {"v_head_dim", c.mla->v_head_dim}};
  if (c.sparse) {  // written only when set, so the canonical text of every other case is unchanged
    j["sparse"] = {{"top_k", c.sparse->top_k},
                   {"index_heads", c.sparse->index_heads},
                   {"index_head_dim", c.sparse->index_head_dim},
                   {"scoring", scoring_name(c.sparse->scoring)}};
    if (!c.sparse->indices.empty()) j["sparse"]["indices"] = c.sparse->indices;
  }
  j["dtype"] = dtype_name(c.dtype);
  const auto& k = c.kv_cache;
  j["kv_cache"] = {{"storage", storage_name(k.storage)},   {"page_size", k.page_size},
                   {"layout", layout_name(k.layout)},      {"allocation", alloc_name(k.allocation)},
                   {"allocation_seed", k.allocation_seed}, {"null_page", k.null_page},
                   {"poison_unused", k.poison_unused},     {"max_num_blocks_per_seq", opt(k.max_num_blocks_per_seq)}};
  if (k.fp8) {  // written only for FP8, so the canonical text of every other case is unchanged
    auto values = [&](const std::vector<double>& v) -> ordered_json {
      if (v.empty()) return "amax";
      if (k.scales.granularity == ScaleGranularity::kTensor) return v[0];
      return v;
    };
    j["kv_cache"]["dtype"] = fp8_name(*k.fp8);
    j["kv_cache"]["scales"] = {
        {"granularity", granularity_name(k.scales.granularity)}, {"k", values(k.scales.k)}, {"v", values(k.scales.v)}};
  }
  const auto& a = c.attention;
  j["attention"] = {{"causal", a.causal},       {"window", opt(a.window)},     {"local_chunk", opt(a.local_chunk)},
                    {"prefix_lm", a.prefix_lm}, {"soft_cap", opt(a.soft_cap)}, {"sm_scale", opt(a.sm_scale)},
                    {"alibi", a.alibi}};
  if (a.mask_mod) j["attention"]["mask_mod"] = *a.mask_mod;
  if (a.score_mod) j["attention"]["score_mod"] = *a.score_mod;
  if (a.sinks) j["attention"]["sinks"] = a.sinks->logits.empty() ? ordered_json(true) : ordered_json(a.sinks->logits);
  const auto& s = c.split;
  j["split"] = {{"planner", planner_name(s.planner)},  {"fixed_split_size", opt(s.fixed_split_size)},
                {"fixed_tile_q", opt(s.fixed_tile_q)}, {"num_sms", s.num_sms},
                {"cuda_graph", s.cuda_graph},          {"partials", partials_name(s.partials)}};
  if (c.cuda_graph)  // written only when set, so the canonical text of every other case is unchanged
    j["cuda_graph"] = {{"bucket", c.cuda_graph->bucket}, {"engine", graph_engine_name(c.cuda_graph->engine)}};
  if (c.parallel) {  // written only when set, so the canonical text of every other case is unchanged
    ordered_json p = ordered_json::object();
    if (c.parallel->context)
      p["context"] = {{"ranks", c.parallel->context->ranks}, {"interleave", c.parallel->context->interleave}};
    if (c.parallel->cascade) p["cascade"] = {{"shared_prefix", c.parallel->cascade->shared_prefix}};
    const auto& mb = c.parallel->merge_base;
    if (mb.size() == 1 && mb.count("")) {
      p["merge_base"] = lse_base_name(mb.at(""));
    } else if (!mb.empty()) {
      p["merge_base"] = ordered_json::object();
      for (const auto& [id, b] : mb) p["merge_base"][id] = lse_base_name(b);
    }
    j["parallel"] = p;
  }
  ordered_json d;
  d["seed"] = c.data.seed;
  d["mean"] = c.data.mean;
  d["std"] = c.data.std;
  if (!c.data.outlier_channels.empty()) d["outliers"] = {{"channels", c.data.outlier_channels}, {"scale", c.data.outlier_scale}};
  j["data"] = d;
  if (c.fp8_attention)
    j["fp8_attention"] = {{"q_scale", c.fp8_attention->q_scale ? ordered_json(*c.fp8_attention->q_scale) : ordered_json("amax")}};
  j["backends"] = c.backends;
  ordered_json cmps = ordered_json::array();
  for (const auto& m : c.comparisons) {
    ordered_json x;
    x["backend"] = m.backend;
    x["baseline"] = m.baseline;
    x["rule"] = rule_name(m.rule);
    x["rtol"] = m.rtol;
    x["atol"] = m.atol;
    if (m.rule == CompareRule::kTwiceLowp) x["lowp"] = m.lowp;
    cmps.push_back(x);
  }
  j["comparisons"] = cmps;
  j["reference"] = {{"sample_rows", opt(c.sample_rows)}};
  j["kernels"] = {{"pad_head_dim_to", opt(c.pad_head_dim_to)}};
  return j;
}

ordered_json case_file_to_json(const CaseFile& f) {
  ordered_json j = case_to_json(f.spec);
  if (!f.environment.is_null()) j["environment"] = ordered_json(f.environment);  // between JSON types, no text
  if (!f.recorded.is_null()) j["recorded"] = ordered_json(f.recorded);
  return j;
}

std::string case_to_text(const CaseSpec& c) { return case_to_json(c).dump(2) + "\n"; }

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write \"" + path + "\"");
  out << text;
  if (!out) throw std::runtime_error("writing \"" + path + "\" failed");
}

}  // namespace attnscope
