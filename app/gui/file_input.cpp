#include "file_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace attnscope::gui {

namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "is a directory";
  if (S_ISFIFO(m)) return "is not a regular file (a FIFO)";
  if (S_ISCHR(m)) return "is not a regular file (a character device)";
  if (S_ISBLK(m)) return "is not a regular file (a block device)";
  if (S_ISSOCK(m)) return "is not a regular file (a socket)";
  return "is not a regular file";
}

// The text after nlohmann's "[json.exception.parse_error.101] " tag, without "parse error at ".
std::string plain_json_error(const std::string& what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const auto e = s.find("] ");
    if (e != std::string::npos) s = s.substr(e + 2);
  }
  if (s.rfind("parse error at ", 0) == 0) s = s.substr(15);
  return s;
}

// Opens path for reading if it is a regular file of at most max_bytes: *fd (and *size) set, or why not.
std::string open_regular(const std::string& path, size_t max_bytes, int* fd_out, size_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return errno == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISREG(st.st_mode) ? std::string("cannot stat: ") + std::strerror(errno) : kind_of(st.st_mode);
    ::close(fd);
    return why;
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return "is " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes >> 20) + " MiB allowed";
  }
  *fd_out = fd;
  *size = static_cast<size_t>(st.st_size);
  return "";
}

}  // namespace

std::string read_regular_file(const std::string& path, size_t max_bytes, std::string* text) {
  int fd = -1;
  size_t size = 0;
  const std::string why = open_regular(path, max_bytes, &fd, &size);
  if (!why.empty()) return why;
  text->clear();
  text->reserve(size);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      const std::string err = std::string("cannot read: ") + std::strerror(errno);
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    if (text->size() + static_cast<size_t>(n) > max_bytes) {  // grew while being read
      ::close(fd);
      return "is more than the " + std::to_string(max_bytes >> 20) + " MiB allowed";
    }
    text->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return "";
}

CaseFile load_case_file(const std::string& path) {
  std::string text;
  const std::string why = read_regular_file(path, kMaxCaseBytes, &text);
  if (!why.empty()) throw std::runtime_error(path + ": " + why);
  return parse_case_text(text);
}

SweepReport load_sweep_report(const std::string& path) {
  auto fail = [&](const std::string& why) { return std::invalid_argument(path + ": " + why); };
  int fd = -1;
  size_t size = 0;
  const std::string why = open_regular(path, kMaxReportBytes, &fd, &size);
  if (!why.empty()) throw fail(why);
  // parsed from the file as it is read: the text is never held whole either
  std::unique_ptr<FILE, int (*)(FILE*)> file(::fdopen(fd, "rb"), &std::fclose);
  if (!file) {
    ::close(fd);
    throw fail(std::string("cannot read: ") + std::strerror(errno));
  }
  if (size == 0) throw fail("the file is empty (expected the output of attnscope-cli sweep --json)");
  // points are converted as the parser finishes each one and then dropped from the tree
  using json = nlohmann::json;
  SweepReport r;
  std::string point_error;
  bool in_points = false;
  size_t index = 0;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key) in_points = parsed == "points";
    using E = json::parse_event_t;
    // an element of /points is complete: an object (a point), or anything else (an error)
    if (!(in_points && depth == 2 && (ev == E::object_end || ev == E::array_end || ev == E::value))) return true;
    if (point_error.empty() && ev != E::object_end) {
      point_error = "/points/" + std::to_string(index) + ": not an object";
    } else if (point_error.empty()) {
      try {
        json one = {{"schema", "attnscope/sweep@1"}, {"case", ""}, {"path", ""}, {"points", json::array()}};
        one["points"].push_back(std::move(parsed));  // moved, not copied
        r.points.push_back(std::move(sweep_from_json(one).points.at(0)));
      } catch (const std::exception& e) {
        std::string m = plain_json_error(e.what());
        const auto at = m.find("/points/0");
        if (at != std::string::npos) m.replace(at, 9, "/points/" + std::to_string(index));
        point_error = m;
      }
    }
    ++index;
    return false;
  };
  json j;
  try {
    j = json::parse(file.get(), cb);
  } catch (const json::exception& e) {
    throw fail("not valid JSON: " + plain_json_error(e.what()));
  }
  if (!j.is_object()) throw fail("/: not an object (expected the output of attnscope-cli sweep --json)");
  if (!j.contains("schema") || !j["schema"].is_string())
    throw fail("/schema: missing (expected \"attnscope/sweep@1\", the output of attnscope-cli sweep --json)");
  if (j["schema"] != "attnscope/sweep@1")
    throw fail("/schema: \"" + j["schema"].get<std::string>() + "\" is not attnscope/sweep@1");
  if (!j.contains("points") || !j["points"].is_array()) throw fail("/points: missing or not an array");
  if (!point_error.empty()) throw fail(point_error);
  try {
    j["points"] = json::array();  // already converted
    SweepReport head = sweep_from_json(j);
    r.case_name = std::move(head.case_name);
    r.path = std::move(head.path);
    r.base = std::move(head.base);
  } catch (const std::exception& e) {
    throw fail(plain_json_error(e.what()));
  }
  return r;
}

std::string parse_window_size(const std::string& s, int* w, int* h) {
  int a = 0, b = 0;
  char extra = 0;
  if (std::sscanf(s.c_str(), "%dx%d%c", &a, &b, &extra) != 2) return "must be WxH (e.g. 1280x800)";
  if (a < 320 || b < 240) return "must be at least 320x240";
  if (a > kMaxWindowSide || b > kMaxWindowSide)
    return "must be at most " + std::to_string(kMaxWindowSide) + "x" + std::to_string(kMaxWindowSide);
  *w = a;
  *h = b;
  return "";
}

std::string check_screenshot_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return "is empty";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return kind_of(st.st_mode);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);  // no O_TRUNC: nothing changes yet
    if (fd < 0) return std::string("cannot be written: ") + std::strerror(errno);
    ::close(fd);
    return "";
  }
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  struct stat pst {};
  if (::stat(parent.c_str(), &pst) != 0) return "its folder " + parent.string() + " does not exist";
  if (!S_ISDIR(pst.st_mode)) return "its folder " + parent.string() + " is not a directory";
  // a probe, created exclusively (never through an existing link) and removed at once
  const fs::path probe = parent / (".attnscope-shot-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot be created in " + parent.string() + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace attnscope::gui
