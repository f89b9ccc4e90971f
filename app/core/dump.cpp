#include "dump.h"

#include <filesystem>
#include <fstream>

#include "npy.h"
#include "report_json.h"

namespace attnscope {

void prepare_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create \"" + dir + "\": " + ec.message());
  if (!fs::is_directory(dir)) throw std::runtime_error("\"" + dir + "\" is not a directory");
  // create_directories succeeds on an existing read-only directory: probe with a real file
  const fs::path probe = fs::path(dir) / ".attnscope-write-probe";
  {
    std::ofstream f(probe);
    if (!f) throw std::runtime_error("cannot write in \"" + dir + "\"");
  }
  fs::remove(probe, ec);
}

std::vector<float> logical_kv(const CaseSpec& c, const PageTable& pt, const std::vector<float>& pool, int head_dim) {
  const int Hk = c.num_kv_heads, ps = pt.page_size;
  std::vector<float> out(static_cast<size_t>(c.total_kv()) * Hk * head_dim);
  int64_t row = 0;
  for (size_t r = 0; r < c.requests.size(); ++r)
    for (int key = 0; key < c.requests[r].kv_len; ++key, ++row) {
      const int page = pt.page_of(static_cast<int>(r), key);
      for (int h = 0; h < Hk; ++h)
        for (int d = 0; d < head_dim; ++d)
          out[(row * Hk + h) * head_dim + d] = pool[kv_offset(c.kv_cache.layout, page, key % ps, h, d, ps, Hk, head_dim)];
    }
  return out;
}

int write_input_npys(const CaseSpec& c, const PageTable& pt, const Workload& w, const std::string& dir) {
  const int64_t T = c.total_q(), K = c.total_kv();
  write_npy(dir + "/q.npy", w.q, {T, c.num_qo_heads, c.head_dim_qk});
  write_npy(dir + "/k.npy", logical_kv(c, pt, w.k_pool, c.head_dim_qk), {K, c.num_kv_heads, c.head_dim_qk});
  write_npy(dir + "/v.npy", logical_kv(c, pt, w.v_pool, c.head_dim_vo), {K, c.num_kv_heads, c.head_dim_vo});
  return 3;
}

int write_result_npys(const Session& s, const std::string& dir) {
  const CaseSpec& c = s.spec();
  const int64_t T = c.total_q();
  int files = 0;
  for (const auto& r : s.results) {
    if (!r.ok()) continue;
    write_npy(dir + "/o_" + r.backend + ".npy", r.o, {T, c.num_qo_heads, c.head_dim_vo});
    write_npy(dir + "/lse_" + r.backend + ".npy", r.lse, {T, c.num_qo_heads});
    files += 2;
  }
  return files;
}

void write_npy_i32(const std::string& path, const std::vector<int>& data, const std::vector<int64_t>& shape) {
  // the same header as write_npy (npy.cpp) with descr '<i4': magic, version 1.0, little-endian
  // header length, a Python dict padded with spaces to a multiple of 64 bytes, then the data
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write \"" + path + "\"");
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(header.size() & 0xff));
  out.put(static_cast<char>(header.size() >> 8));
  out << header;
  static_assert(sizeof(int) == 4, "int32 .npy");
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(int)));
  if (!out) throw std::runtime_error("writing \"" + path + "\" failed");
}

int dump_session(const Session& s, const std::string& dir) {
  prepare_output_dir(dir);
  const CaseSpec& c = s.spec();
  const Workload w = make_workload(c, s.plan.pages);
  int files = write_input_npys(c, s.plan.pages, w, dir);
  files += write_result_npys(s, dir);
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
