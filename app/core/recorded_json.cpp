// The shapes make_repro() (repro.cpp) and environment_to_json() (environment.cpp) write.
#include "recorded_json.h"

#include <cctype>
#include <map>
#include <string>

#include "attnscope/case_spec.h"
#include "attnscope/registry.h"
#include "json_strict.h"

namespace attnscope {

namespace {

using json = nlohmann::json;

enum class T { kString, kInt, kBool, kNumber, kObject, kArray };

const char* name(T t) {
  switch (t) {
    case T::kString:
      return "a string";
    case T::kInt:
      return "an integer";
    case T::kBool:
      return "true or false";
    case T::kNumber:
      return "a number";
    case T::kObject:
      return "an object";
    case T::kArray:
      return "an array";
  }
  return "";
}

bool is(const json& v, T t) {
  switch (t) {
    case T::kString:
      return v.is_string();
    case T::kInt:
      return v.is_number_integer();
    case T::kBool:
      return v.is_boolean();
    case T::kNumber:
      return v.is_number();
    case T::kObject:
      return v.is_object();
    case T::kArray:
      return v.is_array();
  }
  return false;
}

// An object whose keys are all in `shape` with those types; `required` keys must be present.
void check_object(const json& o, const std::string& path, const std::map<std::string, T>& shape, bool all_required) {
  if (!o.is_object()) throw CaseError(path, "must be an object, got " + json_kind(o));
  std::string allowed;
  for (const auto& [k, t] : shape) allowed += (allowed.empty() ? "" : ", ") + k;
  for (auto it = o.begin(); it != o.end(); ++it) {
    const auto s = shape.find(it.key());
    if (s == shape.end()) throw CaseError(path + "/" + it.key(), "unknown key, allowed here: " + allowed);
    if (!is(it.value(), s->second))
      throw CaseError(path + "/" + it.key(), std::string("must be ") + name(s->second) + ", got " + json_kind(it.value()));
  }
  if (all_required)
    for (const auto& [k, t] : shape)
      if (!o.contains(k)) throw CaseError(path + "/" + k, "missing, it is required");
}

bool is_digest(const std::string& s) {
  if (s.size() != 16) return false;
  for (char ch : s)
    if (!std::isxdigit(static_cast<unsigned char>(ch)) || std::isupper(static_cast<unsigned char>(ch))) return false;
  return true;
}

}  // namespace

void validate_recorded(const json& rec) {
  check_object(rec, "/recorded",
               {{"digests", T::kObject},
                {"verdicts", T::kArray},
                {"plan", T::kObject},
                {"library_plans", T::kObject},
                {"sources", T::kObject}},
               false);
  // sources: the user code file (and its sha256) of each backend that runs one (python: ids)
  if (rec.contains("sources"))
    for (auto it = rec["sources"].begin(); it != rec["sources"].end(); ++it) {
      const std::string p = "/recorded/sources/" + it.key();
      if (user_code_file(it.key()).empty())
        throw CaseError(p, "\"" + it.key() + "\" is not a backend that runs a code file (python:PATH.py:FUNCTION)");
      check_object(it.value(), p, {{"file", T::kString}, {"sha256", T::kString}}, true);
      const std::string h = it.value()["sha256"].get<std::string>();
      if (h.size() != 64 || h.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw CaseError(p + "/sha256", "must be 64 lowercase hex digits (as `run --export` writes), got \"" + h + "\"");
    }
  if (rec.contains("digests"))
    for (auto it = rec["digests"].begin(); it != rec["digests"].end(); ++it) {
      const std::string p = "/recorded/digests/" + it.key();
      // ids of every family, compiled here or not: a repro recorded elsewhere stays readable
      if (!is_known_backend(it.key()))
        throw CaseError(p, "\"" + it.key() + "\" is not a backend id, must be one of " + known_backends_text());
      if (!it.value().is_string() || !is_digest(it.value().get<std::string>()))
        throw CaseError(p, "must be a digest: 16 lowercase hex digits (as `run --export` writes), got " +
                               (it.value().is_string() ? "\"" + it.value().get<std::string>() + "\"" : json_kind(it.value())));
    }
  if (rec.contains("verdicts")) {
    const json& v = rec["verdicts"];
    for (size_t i = 0; i < v.size(); ++i)
      check_object(v[i], "/recorded/verdicts/" + std::to_string(i),
                   {{"backend", T::kString},
                    {"baseline", T::kString},
                    {"rule", T::kString},
                    {"pass", T::kBool},
                    {"skipped", T::kBool},
                    {"detail", T::kString}},
                   true);
  }
  if (rec.contains("plan"))
    check_object(rec["plan"], "/recorded/plan",
                 {{"cta_tile_q", T::kInt}, {"chunk_pages", T::kInt}, {"num_items", T::kInt}, {"split_kv", T::kBool}}, true);
  // library_plans: an object per library, as `plan --json` writes it (its fields follow the library)
  if (rec.contains("library_plans"))
    for (auto it = rec["library_plans"].begin(); it != rec["library_plans"].end(); ++it)
      if (!it.value().is_object())
        throw CaseError("/recorded/library_plans/" + it.key(),
                        "must be an object (a library's plan), got " + json_kind(it.value()));
}

void validate_environment(const json& env) {
  check_object(env, "/environment",
               {{"attnscope", T::kString},
                {"build", T::kString},
                {"host", T::kString},
                {"cpu", T::kString},
                {"cpu_threads", T::kInt},
                {"cuda_compiled", T::kBool},
                {"devices", T::kArray},
                {"device_note", T::kString},
                {"libraries", T::kObject},
                {"library_mismatch", T::kArray}},
               false);
  if (env.contains("devices")) {
    const json& d = env["devices"];
    for (size_t i = 0; i < d.size(); ++i)
      check_object(d[i], "/environment/devices/" + std::to_string(i),
                   {{"index", T::kInt},
                    {"name", T::kString},
                    {"sm_count", T::kInt},
                    {"compute_capability", T::kString},
                    {"memory_gib", T::kNumber}},
                   false);
  }
}

}  // namespace attnscope
