// The CLI's partition text (partition_report.h).
#include "partition_report.h"

#include <cstdio>
#include <string>

#include "attnscope/partition.h"
#include "attnscope/registry.h"

namespace attnscope {

namespace {

std::string ms(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}
std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}

std::string keys_text(const std::vector<int64_t>& keys) {
  std::string s;
  for (size_t r = 0; r < keys.size() && r < 12; ++r) s += (r ? " " : "") + std::to_string(keys[r]);
  if (keys.size() > 12) s += " ...";
  return s;
}

}  // namespace

void print_partition_plan(std::ostream& o, const CaseSpec& c) {
  if (!is_partitioned(c)) return;
  const std::vector<Partition> parts = make_partitions(c);
  if (c.parallel->context)
    o << "partitions  context parallel: " << c.parallel->context->ranks << " ranks, interleave "
      << c.parallel->context->interleave << " (rank r owns position p iff floor(p / " << c.parallel->context->interleave
      << ") mod " << c.parallel->context->ranks << " == r); merged by LSE in rank order\n";
  else
    o << "partitions  cascade: shared prefix of " << c.parallel->cascade->shared_prefix
      << " keys (level 0, not causal), each request's own keys (level 1); merged by LSE, level 0 first\n";
  for (const Partition& p : parts) {
    o << "  " << p.label << ": keys per request " << keys_text(p.keys);
    if (p.sub.requests.empty()) {
      o << "; holds no key: its partial is O = 0, LSE = -inf\n";
      continue;
    }
    const Plan sp = plan_case(p.sub);
    o << "; its plan: tile " << sp.split.cta_tile_q << ", chunk " << sp.split.chunk_pages << " pages, "
      << (sp.split.split_kv ? "split-KV" : "no split") << ", " << sp.split.num_items << " items, " << sp.pages.indices.size()
      << " pages";
    if (p.sub.has_sinks()) o << "; counts the sink";
    o << "\n";
  }
}

void print_partition_run(std::ostream& o, const Session& s) {
  bool any = false;
  for (const Result& r : s.results) {
    if (!r.partition) continue;
    const PartitionReport& p = *r.partition;
    if (!any) o << "\npartitions  " << p.collective << "\n";
    any = true;
    o << "  " << r.backend << ": LSE read in base " << lse_base_name(p.read) << " (its own: " << lse_base_name(p.native) << ")";
    for (const auto& part : p.parts)
      o << "; " << part.label << " "
        << (part.timing.device_ms > 0 ? ms(part.timing.device_ms) + " ms (device)" : ms(part.timing.host_ms) + " ms");
    o << "; attnscope's merge " << ms(p.merge_ms) << " ms (host)\n";
  }
  for (const MergeBaseCheck& m : s.merge_checks)
    o << "  base check " << m.backend << ": its partials merge into the reference's answer in " << m.verdict
      << ": max |O - ref| merged as base e " << sci(m.err_e) << ", as base 2 " << sci(m.err_2) << "\n";
  // the merge kernels of the build last: which run depends on the build and the device
  for (const Result& r : s.results)
    for (size_t k = 1; r.partition && k < r.partition->merges.size(); ++k) {
      const MergeRun& m = r.partition->merges[k];
      o << "  " << r.backend << " merged by " << m.id << ": "
        << (m.status == Status::kOk                          ? m.vs_attnscope + " (vs attnscope's), " + ms(m.device_ms) + " ms"
            : m.message.rfind(status_name(m.status), 0) == 0 ? m.message
                                                             : std::string(status_name(m.status)) + ": " + m.message)
        << "\n";
    }
}

}  // namespace attnscope
