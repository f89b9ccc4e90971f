#include "dump.h"

#include <filesystem>

#include "attnscope/workload.h"
#include "npy.h"
#include "report_json.h"

namespace attnscope {

int dump_session(const Session& s, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create \"" + dir + "\": " + ec.message());
  const CaseSpec& c = s.spec();
  const Workload w = make_workload(c, s.plan.pages);
  const int Hk = c.num_kv_heads, Dq = c.head_dim_qk, Dv = c.head_dim_vo, ps = s.plan.pages.page_size;
  const int64_t T = c.total_q(), K = c.total_kv();
  std::vector<float> k(static_cast<size_t>(K) * Hk * Dq), v(static_cast<size_t>(K) * Hk * Dv);
  int64_t row = 0;
  for (size_t r = 0; r < c.requests.size(); ++r)
    for (int key = 0; key < c.requests[r].kv_len; ++key, ++row)
      for (int h = 0; h < Hk; ++h) {
        const int page = s.plan.pages.page_of(static_cast<int>(r), key);
        for (int d = 0; d < Dq; ++d)
          k[(row * Hk + h) * Dq + d] = w.k_pool[kv_offset(c.kv_cache.layout, page, key % ps, h, d, ps, Hk, Dq)];
        for (int d = 0; d < Dv; ++d)
          v[(row * Hk + h) * Dv + d] = w.v_pool[kv_offset(c.kv_cache.layout, page, key % ps, h, d, ps, Hk, Dv)];
      }
  int files = 0;
  write_npy(dir + "/q.npy", w.q, {T, c.num_qo_heads, Dq});
  write_npy(dir + "/k.npy", k, {K, Hk, Dq});
  write_npy(dir + "/v.npy", v, {K, Hk, Dv});
  files += 3;
  for (const auto& r : s.results) {
    if (!r.ok()) continue;
    write_npy(dir + "/o_" + r.backend + ".npy", r.o, {T, c.num_qo_heads, Dv});
    write_npy(dir + "/lse_" + r.backend + ".npy", r.lse, {T, c.num_qo_heads});
    files += 2;
  }
  nlohmann::ordered_json meta;
  meta["schema"] = "attnscope/dump@1";
  meta["case"] = case_to_json(c);
  meta["sm_scale"] = c.sm_scale_or_default();
  meta["q_len"] = nlohmann::json::array();
  meta["kv_len"] = nlohmann::json::array();
  for (const auto& r : c.requests) {
    meta["q_len"].push_back(r.q_len);
    meta["kv_len"].push_back(r.kv_len);
  }
  meta["results"] = nlohmann::ordered_json::array();
  for (const auto& r : s.results) meta["results"].push_back(result_to_json(r));
  write_text_file(dir + "/meta.json", meta.dump(2) + "\n");
  return files + 1;
}

}  // namespace attnscope
