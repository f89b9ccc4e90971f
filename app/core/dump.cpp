#include "dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "report_json.h"

namespace attnscope {

namespace {

std::string os_error(const std::string& what, const std::string& path) {
  return what + " \"" + path + "\": " + std::strerror(errno);
}

// A new regular file dir/.<stem>.<pid>.<n>.tmp, created exclusively (O_EXCL fails on any existing
// name, a dangling link included, so nothing already in DIR is opened). Returns its fd; *path its name.
int create_exclusive(const std::string& dir, const std::string& stem, std::string* path) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    *path = dir + "/." + stem + "." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ".tmp";
    const int fd = ::open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = EIO;  // no progress and no error: do not loop
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The .npy header (version 1.0): magic, little-endian header length, a Python dict padded with
// spaces so that the data starts at a multiple of 64 bytes.
std::string npy_header(const char* descr, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";  // a Python 1-tuple
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string h("\x93NUMPY\x01\x00", 8);
  h += static_cast<char>(dict.size() & 0xff);
  h += static_cast<char>(dict.size() >> 8);
  return h + dict;
}

}  // namespace

void write_file_in(const std::string& dir, const std::string& name, std::initializer_list<std::string_view> parts) {
  const std::string path = dir + "/" + name;
  std::string tmp;
  const int fd = create_exclusive(dir, name, &tmp);
  if (fd < 0) throw std::runtime_error(os_error("cannot write", path));
  int err = 0;
  for (const std::string_view part : parts)
    if (err == 0 && !write_all(fd, part.data(), part.size())) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  // rename replaces a link or file at `path`; it never writes through it
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) == 0) return;
  if (err == 0) err = errno;
  ::unlink(tmp.c_str());
  throw std::runtime_error("cannot write \"" + path + "\": " + std::strerror(err));
}

void prepare_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create \"" + dir + "\": " + ec.message());
  if (!fs::is_directory(dir)) throw std::runtime_error("\"" + dir + "\" is not a directory");
  // create_directories succeeds on an existing read-only directory: probe with a new file of a
  // fresh name (what is already in DIR, a link included, is not opened)
  std::string probe;
  const int fd = create_exclusive(dir, "attnscope-write-probe", &probe);
  if (fd < 0) throw std::runtime_error("cannot write in \"" + dir + "\": " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

template <class T>
void write_npy_in(const std::string& dir, const std::string& name, const std::vector<T>& data,
                  const std::vector<int64_t>& shape) {
  static_assert(sizeof(float) == 4 && sizeof(int) == 4, "float32 / int32 .npy");
  // a header promising more (or fewer) values than follow is a file NumPy refuses to load
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (static_cast<int64_t>(data.size()) != count)
    throw std::logic_error(name + ": " + std::to_string(data.size()) + " values for a shape of " + std::to_string(count));
  const std::string header = npy_header(std::is_same_v<T, float> ? "<f4" : "<i4", shape);
  write_file_in(dir, name, {header, {reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T)}});
}
template void write_npy_in(const std::string&, const std::string&, const std::vector<float>&, const std::vector<int64_t>&);
template void write_npy_in(const std::string&, const std::string&, const std::vector<int>&, const std::vector<int64_t>&);

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
  write_npy_in(dir, "q.npy", w.q, {T, c.num_qo_heads, c.head_dim_qk});
  write_npy_in(dir, "k.npy", logical_kv(c, pt, w.k_pool, c.head_dim_qk), {K, c.num_kv_heads, c.head_dim_qk});
  write_npy_in(dir, "v.npy", logical_kv(c, pt, w.v_pool, c.head_dim_vo), {K, c.num_kv_heads, c.head_dim_vo});
  return 3;
}

std::string result_npy_name(const std::string& prefix, const std::string& backend) {
  std::string n = prefix;
  for (char ch : backend) n += ch == '/' ? "%2F" : ch == '%' ? "%25" : std::string(1, ch);
  return n + ".npy";
}

int write_result_npys(const Session& s, const std::string& dir) {
  const CaseSpec& c = s.spec();
  const int64_t T = c.total_q();
  int files = 0;
  for (const auto& r : s.results) {
    if (!r.ok()) continue;
    write_npy_in(dir, result_npy_name("o_", r.backend), r.o, {T, c.num_qo_heads, c.head_dim_vo});
    ++files;
    if (r.lse.empty()) continue;  // a Python function may return O alone (meta.json says so)
    write_npy_in(dir, result_npy_name("lse_", r.backend), r.lse, {T, c.num_qo_heads});
    ++files;
  }
  return files;
}

namespace {

// meta.json's record of a result's files: which were written and, for a missing LSE, why.
nlohmann::ordered_json dumped_files_json(const Result& r) {
  if (!r.ok()) return nullptr;
  nlohmann::ordered_json f;
  f["o"] = result_npy_name("o_", r.backend);
  f["lse"] = r.lse.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(result_npy_name("lse_", r.backend));
  if (r.lse.empty()) f["note"] = "no " + result_npy_name("lse_", r.backend) + ": the backend returned O without an LSE";
  return f;
}

}  // namespace

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
  for (const auto& r : s.results) {
    nlohmann::ordered_json j = result_to_json(r);
    j["files"] = dumped_files_json(r);
    meta["results"].push_back(std::move(j));
  }
  const std::string text = meta.dump(2) + "\n";
  write_file_in(dir, "meta.json", {text});
  return files + 1;
}

}  // namespace attnscope
