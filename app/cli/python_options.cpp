#include "python_options.h"

#include "attnscope/registry.h"
#include "case_json.h"

namespace attnscope::cli {
namespace {

std::string why_refused(const std::string& id, bool from_case) {
  return id + " runs the code in " + user_code_file(id) + (from_case ? ", which came with the case" : "") +
         "; run it only if you trust that file: pass --allow-python";
}

}  // namespace

Args parse_backend_args(int argc, char** argv, std::set<std::string> flags, std::set<std::string> valued) {
  flags.insert("allow-python");
  valued.insert("python-timeout");
  const Args a = parse_args(argc, argv, flags, valued);
  if (auto t = a.value("python-timeout")) {
    size_t used = 0;
    double s = 0;
    try {
      s = std::stod(*t, &used);
    } catch (...) {
      used = 0;
    }
    if (used != t->size() || !(s > 0) || s > 86400)
      throw UsageError("--python-timeout: \"" + *t + "\" must be a number of seconds in (0, 86400]");
    set_user_code_timeout(s);
  }
  allow_all_user_code(a.flag("allow-python"));
  if (a.flag("allow-python")) return a;
  // the ids the command line names (an entry of consistency's --backends may be PREFILL>DECODE)
  for (const char* opt : {"backends", "backend"}) {
    std::vector<std::string> ids = std::string(opt) == "backend" ? std::vector<std::string>{} : a.list_value(opt);
    if (std::string(opt) == "backend" && a.value(opt)) ids.push_back(*a.value(opt));
    for (const auto& e : ids)
      for (const auto& id : {e.substr(0, e.find('>')), e.find('>') == std::string::npos ? e : e.substr(e.find('>') + 1)})
        if (!user_code_file(id).empty()) throw UsageError(std::string("--") + opt + ": " + why_refused(id, false));
  }
  if (a.value("backends") || a.positional.size() != 1) return a;  // --backends replaces the case's list
  const CaseFile f = read_case_file(a.case_path());
  for (size_t i = 0; i < f.spec.backends.size(); ++i)
    if (!user_code_file(f.spec.backends[i]).empty())
      throw CaseError("/backends/" + std::to_string(i), why_refused(f.spec.backends[i], true));
  return a;
}

}  // namespace attnscope::cli
