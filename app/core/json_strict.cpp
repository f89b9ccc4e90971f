// A SAX handler of our own builds the value: nlohmann's callback parser rescans the enclosing
// container for discarded values each time an object ends (quadratic in a long array of objects),
// and a handler sees every key and array item as it is read, so limits stop the read at once.
#include "json_strict.h"

#include <limits>
#include <type_traits>

#include "attnscope/case_spec.h"
#include "attnscope/mask_expr.h"

namespace attnscope {

namespace {

using json = nlohmann::json;

// RFC 6901 escaping, as the rest of the case errors spell paths; printable() keeps NULs visible.
std::string escape(const std::string& k) {
  std::string s;
  s.reserve(k.size());
  for (char ch : k) {
    if (ch == '~')
      s.append("~0");
    else if (ch == '/')
      s.append("~1");
    else
      s.push_back(ch);
  }
  return printable(s);
}

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < p.size()) {
    const size_t j = p.find('/', i + 1);
    out.push_back(p.substr(i + 1, (j == std::string::npos ? p.size() : j) - i - 1));
    i = j == std::string::npos ? p.size() : j;
  }
  return out;
}

class StrictSax {
 public:
  StrictSax(json* root, const std::vector<JsonArrayLimit>& limits) : root_(root) {
    for (const auto& l : limits) limits_.push_back({split_path(l.path), &l});
  }

  bool null() { return place(json(nullptr)) != nullptr; }
  bool boolean(bool v) { return place(json(v)) != nullptr; }
  bool number_integer(json::number_integer_t v) { return place(json(v)) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return place(json(v)) != nullptr; }
  bool number_float(json::number_float_t v, const std::string&) { return place(json(v)) != nullptr; }
  bool string(std::string& v) { return place(json(std::move(v))) != nullptr; }
  bool binary(json::binary_t& v) { return place(json(std::move(v))) != nullptr; }
  bool start_object(size_t) { return open(json::object(), false); }
  bool start_array(size_t) { return open(json::array(), true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    Frame& f = stack_.back();
    if (f.node->contains(k))
      throw CaseError(path(), "duplicate key \"" + printable(k) +
                                  "\": JSON readers disagree on which value wins, so a case may not repeat a key");
    f.key = std::move(k);
    return true;
  }
  template <class Exception>
  bool parse_error(size_t, const std::string& token, const Exception& ex) {
    // A number past a double's range (1e999) is a bad value, not bad syntax: named like every other.
    if constexpr (std::is_same_v<Exception, json::out_of_range>)
      throw CaseError(next_item_path(),
                      printable(token) + " is not allowed, a number must be finite (at most about 1.8e308 in magnitude)");
    throw ex;  // as json::parse throws it: the caller turns the byte offset into line and column
  }

 private:
  struct Frame {
    json* node = nullptr;
    bool array = false;
    size_t count = 0;  // arrays: items read so far
    std::string key;   // objects: the key being read
    const JsonArrayLimit* limit = nullptr;
  };
  struct Limit {
    std::vector<std::string> segments;
    const JsonArrayLimit* limit;
  };

  // Path of the container on top of the stack (of its current item when `item`).
  std::string path(bool item = false) const {
    std::string p;
    const size_t n = item ? stack_.size() : stack_.size() - 1;
    for (size_t i = 0; i < n; ++i) p += "/" + (stack_[i].array ? std::to_string(stack_[i].count - 1) : escape(stack_[i].key));
    return p.empty() ? "/" : p;
  }

  // Path of the value the parser is reading now (the next array item, or the current key's value).
  std::string next_item_path() const {
    if (stack_.empty()) return "/";
    std::string p = path();
    if (p == "/") p.clear();
    const Frame& f = stack_.back();
    return p + "/" + (f.array ? std::to_string(f.count) : escape(f.key));
  }

  // Stores v where the parser is (root, next array item, or the current key) and returns it.
  json* place(json&& v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Frame& f = stack_.back();
    if (!f.array) {
      json& slot = (*f.node)[f.key];
      slot = std::move(v);
      return &slot;
    }
    ++f.count;
    if (f.limit && f.count > f.limit->max)
      throw CaseError(path(true), "one past the limit: at most " + std::to_string(f.limit->max) + " " + f.limit->what +
                                      " are allowed (reading stopped here)");
    f.node->push_back(std::move(v));
    return &f.node->back();
  }

  const JsonArrayLimit* limit_of_top() const {
    for (const auto& l : limits_) {
      if (l.segments.size() != stack_.size()) continue;
      bool match = true;
      for (size_t i = 0; i < stack_.size() && match; ++i) {
        const Frame& f = stack_[i];
        const std::string seg = f.array ? std::to_string(f.count - 1) : f.key;
        match = l.segments[i] == "*" || l.segments[i] == seg;
      }
      if (match) return l.limit;
    }
    return nullptr;
  }

  bool open(json&& container, bool array) {
    json* node = place(std::move(container));
    if (stack_.size() >= kMaxJsonDepth)
      throw CaseError(path(true), "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep; no case needs that many");
    // A container is reached through pointers to its parents' items: the parents do not grow while
    // it is open, so the pointers stay valid.
    Frame f;
    f.node = node;
    f.array = array;
    if (array && !limits_.empty()) f.limit = limit_of_top();
    stack_.push_back(std::move(f));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  json* root_;
  std::vector<Frame> stack_;
  std::vector<Limit> limits_;
};

}  // namespace

nlohmann::json parse_json_strict(const std::string& text, const std::vector<JsonArrayLimit>& limits) {
  json root;
  StrictSax sax(&root, limits);
  json::sax_parse(text, &sax);
  return root;
}

std::string json_kind(const nlohmann::json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

}  // namespace attnscope
