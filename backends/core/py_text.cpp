// Python source text helpers (py_text.h).
#include "attnscope/py_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <sstream>

namespace attnscope {

namespace {

void utf8_escapes(const std::string& s, bool literal, std::string* out) {
  auto hex = [](unsigned v, int digits) {
    static const char* d = "0123456789abcdef";
    std::string h(digits, '0');
    for (int i = digits - 1; i >= 0; --i, v >>= 4) h[i] = d[v & 15];
    return h;
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (literal && (c == '\\' || c == '"')) *out += '\\';
      *out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      const char* named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : nullptr;
      *out += named ? named : "\\x" + hex(c, 2);
      ++i;
      continue;
    }
    // a UTF-8 sequence: lead byte, continuation bytes, no overlong forms or surrogates
    const int n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? (c < 0xf0 ? 3 : 0) : c >= 0xc2 ? 2 : 0;
    uint32_t cp = n == 4 ? c & 7u : n == 3 ? c & 15u : c & 31u;
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    ok = ok && !(n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff));
    if (!ok) {
      *out += std::string(literal ? "\\\\x" : "\\x") + hex(c, 2);  // a byte that is no character
      ++i;
      continue;
    }
    *out += cp > 0xffff ? "\\U" + hex(cp, 8) : "\\u" + hex(cp, 4);
    i += n;
  }
}

}  // namespace

std::string py_float(double x) {
  if (std::isnan(x)) return "float(\"nan\")";
  if (std::isinf(x)) return x > 0 ? "float(\"inf\")" : "-float(\"inf\")";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);  // shortest text that reads back the same double
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string py_str(const std::string& s) {
  std::string out = "\"";
  utf8_escapes(s, true, &out);
  return out + "\"";
}

std::string py_comment_text(const std::string& s) {
  std::string out;
  utf8_escapes(s, false, &out);
  return out;
}

std::string py_one_line(std::string s) {
  for (char& ch : s) ch = (ch == '\n' || ch == '\r' || ch == '\t') ? ' ' : ch;
  return py_comment_text(s);
}

std::string py_list(const std::vector<std::string>& items, size_t indent) {
  std::string out = "[";
  size_t col = indent + 1;
  for (size_t i = 0; i < items.size(); ++i) {
    const bool wrap = i > 0 && col + 2 + items[i].size() > 99;
    if (i > 0) out += wrap ? ",\n" + std::string(indent + 1, ' ') : ", ";
    col = wrap ? indent + 1 : col + (i > 0 ? 2 : 0);
    out += items[i];
    col += items[i].size();
  }
  return out + "]";
}

std::string py_assign(const std::string& name, const std::vector<std::string>& items) {
  return name + " = " + py_list(items, name.size() + 3) + "\n";
}

std::string py_comment(const std::string& first, const std::string& rest, const std::string& text) {
  std::string out, line = first;
  std::istringstream words(py_one_line(text));
  bool empty = true;
  for (std::string w; words >> w;) {
    if (!empty && line.size() + 1 + w.size() > 100) {
      out += line + "\n";
      line = rest;
      empty = true;
    }
    line += (empty ? "" : " ") + w;
    empty = false;
  }
  return out + line + "\n";
}

std::string py_fill(std::string text, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [key, value] : subs) {
    const std::string mark = "$(" + key + ")";
    for (size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at + value.size()))
      text.replace(at, mark.size(), value);
  }
  return text;
}

}  // namespace attnscope
