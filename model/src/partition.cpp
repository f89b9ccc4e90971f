// Partitions across kernels (partition.h): the sub-cases of context parallelism and cascade, the rules
// a partitioned case follows, and attnscope's merge of the partials.
#include "attnscope/partition.h"

#include <cmath>

namespace attnscope {

bool is_partitioned(const CaseSpec& c) { return c.parallel && (c.parallel->context || c.parallel->cascade); }

const char* lse_base_name(LseBase b) { return b == LseBase::k2 ? "2" : "e"; }

namespace {

std::string features_rule(const CaseSpec& c) {
  const char* why =
      "a partition keeps its keys' order but not their positions, so only masks that need no position run partitioned";
  const AttentionSpec& a = c.attention;
  if (a.window) return std::string("/attention/window: ") + why;
  if (a.local_chunk) return std::string("/attention/local_chunk: ") + why;
  if (a.prefix_lm) return std::string("/attention/prefix_lm: ") + why;
  if (a.alibi) return std::string("/attention/alibi: ") + why + " (ALiBi reads k - q)";
  if (a.mask_mod) return std::string("/attention/mask_mod: ") + why;
  if (a.score_mod) return std::string("/attention/score_mod: ") + why;
  if (c.cuda_graph) return "/cuda_graph: a partitioned case is not replayed through a CUDA graph";
  if (!c.engine.empty()) return "/engine: the engines' metadata describes the whole batch, not a partition";
  if (c.fp8_kv() && c.kv_cache.scales.granularity != ScaleGranularity::kToken &&
      (c.kv_cache.scales.k.empty() || c.kv_cache.scales.v.empty()))
    return "/kv_cache/scales: a partition's amax is not the cache's; give the tensor / head scales (or use token scales)";
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const RequestSpec& q = c.requests[r];
    const std::string at = "/requests/" + std::to_string(r);
    if (!q.doc_starts.empty()) return at + "/doc_starts: " + why;
    if (q.pad_start) return at + "/pad_start: " + why;
    if (!q.tree_parents.empty()) return at + "/tree_parents: " + why;
  }
  return "";
}

}  // namespace

std::string partition_rule(const CaseSpec& c) {
  if (!c.parallel) return "";
  const ParallelSpec& p = *c.parallel;
  if (p.context.has_value() == p.cascade.has_value())
    return "/parallel: give exactly one of \"context\" (keys sharded over ranks) and \"cascade\" (a shared prefix)";
  if (std::string f = features_rule(c); !f.empty()) return f;
  if (p.context) {
    if (p.context->ranks < 2 || p.context->ranks > 64) return "/parallel/context/ranks: an integer from 2 to 64";
    if (p.context->interleave < 1 || p.context->interleave > (1 << 20))
      return "/parallel/context/interleave: an integer from 1 to 1048576 (tokens per rank's turn)";
    for (size_t r = 0; r < c.requests.size(); ++r)
      if (c.attention.causal && c.requests[r].q_len > 1)
        return "/requests/" + std::to_string(r) +
               "/q_len: with context parallel a causal query sees a different part of each shard, so every request "
               "decodes one token (q_len 1) unless /attention/causal is false";
    return "";
  }
  const int P = p.cascade->shared_prefix, ps = c.effective_page_size();
  if (P < 1) return "/parallel/cascade/shared_prefix: at least 1 token";
  if (P % ps != 0)
    return "/parallel/cascade/shared_prefix: " + std::to_string(P) + " is not a multiple of the page size " + std::to_string(ps) +
           " (the prefix is a run of whole pages)";
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const int cached = c.requests[r].kv_len - c.requests[r].q_len;
    if (P > cached)
      return "/parallel/cascade/shared_prefix: " + std::to_string(P) + " is more than request " + std::to_string(r) +
             "'s cached keys (kv_len - q_len = " + std::to_string(cached) + "): every query must see the whole shared prefix";
  }
  return "";
}

namespace {

// c without its partitions, its comparisons or its backends' metadata: what one partition runs
CaseSpec partition_base(const CaseSpec& c) {
  CaseSpec s = c;
  s.parallel.reset();
  s.comparisons.clear();
  s.kv_cache.max_num_blocks_per_seq.reset();  // each partition has its own, tightest table
  return s;
}

Partition context_rank(const CaseSpec& c, int rank) {
  const ContextParallelSpec& cp = *c.parallel->context;
  Partition part;
  part.label = "rank " + std::to_string(rank);
  part.rank = rank;
  part.sub = partition_base(c);
  part.sub.requests.clear();
  part.sub.key_source = KeySource{0, cp.ranks, rank, cp.interleave, 0};
  if (rank > 0) part.sub.attention.sinks.reset();  // rank 0 counts the sink, once
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const int64_t n = shard_size(c.requests[r].kv_len, cp.ranks, rank, cp.interleave);
    part.keys.push_back(n);
    if (n == 0) continue;  // its rows' partial: O = 0, LSE = -inf
    RequestSpec q = c.requests[r];
    q.kv_len = static_cast<int>(n);
    q.seed = c.request_seed(static_cast<int>(r));
    part.sub.requests.push_back(q);
    part.requests.push_back(static_cast<int>(r));
  }
  return part;
}

Partition cascade_level(const CaseSpec& c, int level) {
  const int P = c.parallel->cascade->shared_prefix;
  Partition part;
  part.label = level == 0 ? "level 0: shared prefix" : "level 1: own keys";
  part.rank = level;
  part.sub = partition_base(c);
  part.sub.key_source = KeySource{level == 0 ? 0 : P, 1, 0, 1, P};
  if (level == 0)
    part.sub.attention.causal = false;  // every query sees the whole prefix (partition_rule)
  else
    part.sub.attention.sinks.reset();  // level 0 counts the sink, once
  for (size_t r = 0; r < c.requests.size(); ++r) {
    RequestSpec& q = part.sub.requests[r];
    q.seed = c.request_seed(static_cast<int>(r));
    q.kv_len = level == 0 ? P : q.kv_len - P;
    part.keys.push_back(q.kv_len);
    part.requests.push_back(static_cast<int>(r));
  }
  return part;
}

}  // namespace

std::vector<Partition> make_partitions(const CaseSpec& c) {
  if (!is_partitioned(c)) return {};
  if (std::string rule = partition_rule(c); !rule.empty()) {
    const size_t colon = rule.find(": ");
    throw CaseError(rule.substr(0, colon), rule.substr(colon + 2));
  }
  std::vector<Partition> parts;
  if (c.parallel->context)
    for (int r = 0; r < c.parallel->context->ranks; ++r) parts.push_back(context_rank(c, r));
  else
    for (int l = 0; l < 2; ++l) parts.push_back(cascade_level(c, l));
  return parts;
}

int partition_of_key(const CaseSpec& c, int /*r*/, int64_t p) {
  if (!c.parallel) return 0;
  if (c.parallel->context) return owner_rank(p, c.parallel->context->ranks, c.parallel->context->interleave);
  if (c.parallel->cascade) return p < c.parallel->cascade->shared_prefix ? 0 : 1;
  return 0;
}

void merge_partials(const std::vector<PartialRows>& parts, int64_t rows, int dv, DType dt, LseBase native, LseBase read,
                    std::vector<float>* o, std::vector<float>* lse) {
  o->assign(static_cast<size_t>(rows) * dv, 0.0f);
  lse->assign(static_cast<size_t>(rows), -INFINITY);
  if (parts.empty()) return;
  std::vector<float> acc(dv);
  for (int64_t row = 0; row < rows; ++row) {
    const size_t at = static_cast<size_t>(row) * dv;
    float lse2 = merge_input_lse2(parts[0].lse[row], native, read);
    for (int d = 0; d < dv; ++d) acc[d] = parts[0].o[at + d];
    for (size_t k = 1; k < parts.size(); ++k)
      merge_fold(&lse2, acc.data(), merge_input_lse2(parts[k].lse[row], native, read), parts[k].o + at, dv);
    for (int d = 0; d < dv; ++d) (*o)[at + d] = round_to(dt, acc[d]);
    (*lse)[row] = lse2_to_e(lse2);
  }
}

std::string merge_base_note(const Result& r) {
  if (!r.partition || r.partition->read == r.partition->native) return "";
  auto base = [](LseBase b) { return b == LseBase::k2 ? std::string("base-2") : std::string("natural-log"); };
  return "merged reading " + r.backend + "'s " + base(r.partition->native) + " LSE as " +
         (r.partition->read == LseBase::k2 ? "base 2" : "natural log") + " (/parallel/merge_base \"" +
         lse_base_name(r.partition->read) + "\"; its descriptor says " + lse_base_name(r.partition->native) + ")";
}

}  // namespace attnscope
