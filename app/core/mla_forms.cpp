// attnscope-cli mla-forms: mla_forms.h.
#include "mla_forms.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "attnscope/mla.h"
#include "attnscope/registry.h"
#include "session.h"

namespace attnscope {

int MlaFormsReport::exit_code() const {
  bool unchecked = false;
  for (const auto& r : rows) {
    if ((r.status == Status::kOk && !r.pass) || r.status == Status::kError) return 1;
    // a backend that refuses a form by its descriptor checked nothing there and claims nothing
    unchecked |= r.status == Status::kNotCompiled || r.status == Status::kNoDevice || r.status == Status::kCancelled;
  }
  return unchecked ? 3 : 0;
}

namespace {

struct Form {
  CaseSpec c;
  Plan p;
  Workload w;
};

Form make_form(CaseSpec c) {
  c.sample_rows.reset();  // every row is compared
  Form f{c, plan_case(c), {}};
  f.w = make_workload(f.c, f.p.pages);
  return f;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<float>& ref) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) && std::isfinite(ref[i])) m = std::max(m, std::fabs(a[i] - ref[i]));
  return m;
}

}  // namespace

MlaFormsReport check_mla_forms(const CaseSpec& given, const std::vector<std::string>& backends) {
  if (!given.mla) throw CaseError("/mla", "mla-forms needs an MLA case (a /mla object)");
  const CaseSpec non = given.mla->absorbed ? mla_other_form(given) : given;
  const MlaSpec& m = *given.mla;
  const double macs =
      static_cast<double>(given.total_kv()) * given.num_qo_heads * (m.qk_nope_dim + m.v_head_dim) * m.kv_lora_rank;
  if (macs > kMlaFormsMaxMacs) {
    std::ostringstream o;
    o << "the non-absorbed form's K and V would take " << macs / 1e9 << " G multiply-adds on the host (" << given.num_qo_heads
      << " heads over " << given.total_kv() << " keys), at most " << kMlaFormsMaxMacs / 1e9
      << " G: shorten the requests for mla-forms";
    throw CaseError("/requests", o.str());
  }
  MlaFormsReport rep;
  rep.case_name = given.name;
  rep.given_absorbed = m.absorbed;
  const Form fn = make_form(non), fa = make_form(given.mla->absorbed ? given : mla_other_form(given));
  const Result ref = run_one(backend_for_role(Role::kReference), fn.c, fn.p, fn.w, {});
  const Result low = run_one(backend_for_role(Role::kLowp), fn.c, fn.p, fn.w, {});
  if (!ref.ok() || !low.ok()) throw std::runtime_error("the CPU baselines did not run: " + ref.message + low.message);
  rep.lowp_max_abs = max_abs_diff(std::vector<double>(low.o.begin(), low.o.end()), ref.o);
  rep.bound = 2 * rep.lowp_max_abs + kMlaFormsFloor;
  for (const std::string& id : backends.empty() ? given.backends : backends)
    for (const Form* f : {&fa, &fn}) {
      MlaFormsRow row;
      row.backend = id;
      row.absorbed = f->c.mla->absorbed;
      const Result r = run_one(id, f->c, f->p, f->w, {});
      if (!r.ok()) {
        row.status = r.status;
        row.reason = r.message;
      } else {
        const std::vector<double> o = row.absorbed ? mla_project_output(f->c, r.o) : std::vector<double>(r.o.begin(), r.o.end());
        row.max_abs = max_abs_diff(o, ref.o);
        row.pass = row.max_abs <= rep.bound;
      }
      rep.rows.push_back(row);
    }
  return rep;
}

}  // namespace attnscope
