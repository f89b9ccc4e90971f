// The repro case of a session: the case as run, where it ran, and what it gave (digests, verdicts,
// plan), which `attnscope-cli run` on the file replays and re-checks.
#include "repro.h"

#include "attnscope/registry.h"
#include "attnscope/sha256.h"
#include "environment.h"
#include "report_json.h"

namespace attnscope {

CaseFile make_repro(const Session& s) {
  CaseFile f;
  f.spec = s.spec();
  if (s.sample_rows) f.spec.sample_rows = s.sample_rows;
  f.environment = nlohmann::json(environment_to_json(s.env));  // between JSON types, no text
  nlohmann::json rec;
  nlohmann::json dig = nlohmann::json::object();
  for (const auto& r : s.results)
    if (r.ok()) dig[r.backend] = result_digest(r);
  rec["digests"] = dig;
  // the user code a backend ran (python: backends): its file's sha256, which a replay checks first
  nlohmann::json src = nlohmann::json::object();
  for (const auto& r : s.results) {
    const std::string file = user_code_file(r.backend);
    std::string why;
    const std::string sha = r.ok() && !file.empty() ? file_sha256(file, &why) : "";
    if (!sha.empty()) src[r.backend] = {{"file", file}, {"sha256", sha}};
  }
  if (!src.empty()) rec["sources"] = src;
  nlohmann::json verdicts = nlohmann::json::array();
  for (const auto& d : s.diffs)
    verdicts.push_back({{"backend", d.backend},
                        {"baseline", d.baseline},
                        {"rule", d.verdict.rule},
                        {"pass", d.verdict.pass},
                        {"skipped", d.verdict.skipped},
                        {"detail", d.verdict.detail}});
  rec["verdicts"] = verdicts;
  rec["plan"] = {{"cta_tile_q", s.plan.split.cta_tile_q},
                 {"chunk_pages", s.plan.split.chunk_pages},
                 {"num_items", s.plan.split.num_items},
                 {"split_kv", s.plan.split.split_kv}};
  // FlashInfer's own plan where it was recorded, beside the model's (old repros lack it; the reader
  // keeps /recorded as it finds it, so both read)
  rec["library_plans"] = nlohmann::json(library_plans_to_json(s.plan));
  f.recorded = rec;
  return f;
}

}  // namespace attnscope
