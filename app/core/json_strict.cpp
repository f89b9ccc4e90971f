// Duplicate keys are found during parsing with nlohmann's parser callback, which sees every key as
// it is read; a stack of open containers gives the JSON path of the object that holds the key.
#include "json_strict.h"

#include <set>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope {

namespace {

struct Frame {
  bool array = false;
  int index = -1;   // arrays: the element being read
  std::string key;  // objects: the key being read
  std::set<std::string> keys;
};

// RFC 6901 escaping, as the rest of the case errors spell paths.
std::string escape(const std::string& k) {
  std::string s;
  for (char ch : k) s += ch == '~' ? std::string("~0") : ch == '/' ? std::string("~1") : std::string(1, ch);
  return s;
}

std::string path_of(const std::vector<Frame>& stack, size_t depth) {
  std::string p;
  for (size_t i = 0; i < depth && i < stack.size(); ++i)
    p += "/" + (stack[i].array ? std::to_string(stack[i].index) : escape(stack[i].key));
  return p.empty() ? "/" : p;
}

}  // namespace

nlohmann::json parse_json_strict(const std::string& text) {
  using json = nlohmann::json;
  std::vector<Frame> stack;
  // A value, object or array starting inside an array is its next element.
  auto next_element = [&stack]() {
    if (!stack.empty() && stack.back().array) ++stack.back().index;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        next_element();
        stack.push_back(Frame{ev == json::parse_event_t::array_start});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        const std::string k = parsed.get<std::string>();
        if (!f.keys.insert(k).second)
          throw CaseError(
              path_of(stack, stack.size() - 1),
              "duplicate key \"" + k + "\": JSON readers disagree on which value wins, so a case may not repeat a key");
        f.key = k;
        break;
      }
      case json::parse_event_t::value:
        next_element();
        break;
    }
    return true;
  };
  return json::parse(text, cb);
}

std::string json_kind(const nlohmann::json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

}  // namespace attnscope
