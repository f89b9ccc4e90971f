// attnscope-cli: validate | plan | run | invariance | consistency | mla-forms | bench | sweep | explain |
// devices | backends (the usage below says what each does).
// Exit codes: 0 ok, 1 a comparison, replay or backend failed, 2 bad case or bad arguments, 3 something
// could not be checked here.
#include <unistd.h>

#include <climits>
#include <iostream>

#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "bench.h"
#include "case_json.h"
#include "cli_args.h"
#include "consistency.h"
#include "consistency_report.h"
#include "dump.h"
#include "engine_report.h"
#include "environment.h"
#include "explain.h"
#include "explain_report.h"
#include "export_merge.h"
#include "export_script.h"
#include "invariance.h"
#include "mla_forms.h"
#include "plan_cost.h"
#include "python_options.h"
#include "report_json.h"
#include "repro.h"
#include "session.h"
#include "sweep.h"
#include "test_hooks.h"
#include "text_report.h"

using namespace attnscope;
using namespace attnscope::cli;

namespace {

const char* kUsageTemplate = R"(attnscope-cli: attention kernels on configurable batches, headless

usage: attnscope-cli COMMAND [options] CASE.json
       attnscope-cli --help | --version

commands:
  validate CASE            check a case; prints a one-line summary or the error
  plan CASE [--json]       page table, virtual batches, split plan with its reasoning, block map
      --flex-block-mask N  print each request's mask as FlexAttention's print(create_block_mask(..., BLOCK_SIZE=N))
      --engine ID          the metadata tensors engine ID builds for the batch: sglang-fa, vllm-flashinfer
  run CASE [options]       run the backends and comparisons of the case
      --backends a,b,...   run these backends instead of the case's list
      --sample-rows N      references on N sampled query rows per request
      --report FILE        write the JSON report to FILE
      --export FILE        write a repro case (case + environment + recorded digests, plan, verdicts)
      --dump DIR           write inputs and outputs as .npy (q, k, v, o_<backend>, lse_<backend>) + meta.json
      --export-script DIR  write DIR/repro.py, a Python repro that runs the library itself (FlashInfer,
                           PyTorch SDPA / flex_attention) on the inputs, + the .npy files it reads
      --script-backend ID  the backend the script reproduces (default: the first whose library has a
                           script writer, else the first that is not a reference or low-precision baseline)
      --gpus N             a /parallel case's ranks on N GPUs, rank k on GPU k % N (default: every
                           visible GPU; 1: one after another on GPU 0, "virtual")
      --json               print the JSON report instead of the table
  invariance CASE [options]  each request alone vs inside the batch, per planner
      --backend ID         backend to check (default {TWIN})
      --planners a,b,...   planner models (default flashinfer,flash_attn,fixed,off)
      --fixed-split-size N pages per chunk for `fixed` (default: the case's, else 2048 tokens)
      --fixed-tile-q N     query tile for `fixed` (default: the case's, else 128)
      --json
  consistency CASE --last N [options]
                           decode vs prefill: the last N tokens of every request computed as one
                           prefill (q_len N) and as N decode steps (the cache one key longer each
                           step), per backend; max |diff| of O per position and the first position
                           that differs (docs/conventions.md section 11). cpu.reference and cpu.lowp
                           must be bit-identical (exit 1 if not); another backend's difference is
                           reported (exit 0)
      --last N             tokens per request, 1 <= N <= the smallest kv_len (required)
      --backends a,b,...   check these backends instead of the case's list; an entry P>D runs
                           the prefill on P and the decode steps on D (flashinfer.prefill>flashinfer.decode)
      --json               the verdicts and the per-position series as JSON
  mla-forms CASE [options] an MLA case in both forms (docs/conventions.md section 13): each backend on the
                           absorbed form (its output times W_uv) and the non-absorbed one, against
                           cpu.reference on the non-absorbed form under the 2x rule (cpu.lowp's error)
      --backends a,b,...   these backends instead of the case's list
  bench CASE [options]     time GPU backends with CUDA events
      --backends a,b,...   backends to time (default {BENCH})
      --reps N             timed repetitions after 3 warm-ups (default 20)
      --gpus N             a /parallel case's ranks on N GPUs (as run); its row is the step: the
                           busiest GPU's kernels + the collective + the device merge
      --plan-only          no kernels: each planner's host time per call (attnscope's split models,
                           its whole plan, the libraries' own planners) at every batch size, the
                           case's requests cut or extended (copies of the last one); median of --reps
      --batches SIZES      with --plan-only: 1,8,64 or START:STOP:xFACTOR (default 1:1024:x2)
      --json
  sweep CASE --set PATH=VALUES [options]
                           run the case once per value of one case path; plan figures, times and
                           comparison statistics per value
      --set PATH=V1,V2,... or PATH=START:STOP:xFACTOR or PATH=START:STOP:+STEP
                           PATH is a case JSON path; * stands for every array element
                           (/requests/*/kv_len, /split/fixed_split_size, /kv_cache/page_size);
                           /requests/# is the batch size (copies of the last request); at most
                           10000 values; a comma inside "...", (...), [...] or {...} is part of
                           the value: '/attention/mask_mod=min(kv_idx, q_idx) >= 0,kv_idx < 9'
      --backends a,b,...   run these backends instead of the case's list
      --reps N             time GPU backends with CUDA events (median of N) at every value
      --csv FILE           write the table as CSV
      --json
  explain CASE --request R --row Q --head H [--json]
                           online softmax of one query row step by step, as {TWIN} (the plan's CPU
                           twin) computes it under the plan: KV tiles, chunks, partials, merge, and
                           the result beside the exact softmax
  devices [--json]         CUDA devices visible to this build
  backends                 every backend id, what it computes and what it takes

backends: {IDS}

  --allow-python           run the python:PATH.py:FUNCTION backends a case names (run, bench, sweep,
                           invariance, consistency, mla-forms; refused without it, exit 2)
  --python-timeout S       seconds one call of such a backend may take (default 60)
  --help, -h               this text (also after a command); --version: the version

exit codes: 0 ok; 1 a comparison, a replay check or a backend failed; 2 bad case or arguments (one
  line on stderr, starting "error: "); 3 nothing failed, but something could not be checked here
  (no GPU or not compiled, a comparison skipped, a recorded digest not replayed, nothing timed)
)";

// The usage with the registry's answers filled in (ids and defaults are the families' to say).
std::string usage() {
  auto join = [](const std::vector<std::string>& v) {
    std::string t;
    for (const auto& x : v) t += (t.empty() ? "" : ", ") + x;
    return t;
  };
  std::string u = kUsageTemplate;
  const std::pair<std::string, std::string> subs[] = {{"{TWIN}", backend_for_role(Role::kPlanTwin)},
                                                      {"{BENCH}", join(default_bench_backends())},
                                                      {"{IDS}", join(known_backends())}};
  for (const auto& [key, value] : subs)
    for (size_t at = u.find(key); at != std::string::npos; at = u.find(key, at + value.size())) u.replace(at, key.size(), value);
  return u;
}

// Messages may quote bytes of a case that are not UTF-8 (an expression's character cut in two):
// they are replaced by U+FFFD rather than abort the output.
std::string json_text(const nlohmann::ordered_json& j) {
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

int cmd_validate(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  std::cout << "ok: " << case_summary(f.spec) << "\n";
  return 0;
}

int cmd_plan(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  const Plan p = plan_case(f.spec);
  if (a.value("engine")) return plan_engine(a, f.spec, p);
  if (a.value("flex-block-mask")) {
    // what FlexAttention's create_block_mask prints for each request's mask (B = 1, H = 1)
    const int bs = *a.int_value("flex-block-mask", 1, 1 << 20);
    for (size_t r = 0; r < f.spec.requests.size(); ++r)
      std::cout << "request " << r << ": create_block_mask(mask_mod, 1, 1, " << f.spec.requests[r].q_len << ", "
                << f.spec.requests[r].kv_len << ", BLOCK_SIZE=" << bs << ")\n"
                << flex_block_mask_text(p.masks[r], bs, bs) << "\n";
    return 0;
  }
  if (a.flag("json"))
    std::cout << json_text(plan_to_json(f.spec, p));
  else
    print_plan(std::cout, f.spec, p);
  return 0;
}

int cmd_run(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  SessionOptions opt;
  if (a.value("backends")) {
    auto ids = a.list_value("backends");
    for (const auto& id : ids)
      if (!is_known_backend(id))
        throw UsageError("--backends: \"" + id + "\" is not a backend, must be one of " + known_backends_text());
    opt.backends = ids;
  }
  opt.sample_rows = a.int_value("sample-rows", 1, 1 << 22);
  opt.partition_gpus = a.int_value("gpus", 1, 1024).value_or(0);
  // --export-script: the target backend and DIR are checked before the run, so a typo fails at once
  std::string script_backend;
  const auto script_dir = a.value("export-script");
  if (a.value("script-backend") && !script_dir) throw UsageError("--script-backend: needs --export-script DIR");
  if (script_dir) {
    try {
      script_backend = script_target(opt.backends.value_or(f.spec.backends), a.value("script-backend"));
      script_case(f.spec);  // a score_mod the script cannot write
      prepare_output_dir(*script_dir);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw UsageError(what.rfind("--", 0) == 0 ? what : "--export-script: " + what);
    }
  }
  const bool tty = isatty(2);
  if (tty && !a.flag("json"))
    opt.progress = [](const std::string& stage, double x) {
      std::cerr << "\r  " << stage << " " << static_cast<int>(100 * x) << "%   " << std::flush;
    };
  auto s = run_session(f, opt);
  if (tty && !a.flag("json")) std::cerr << "\r" << std::string(40, ' ') << "\r";
  if (a.flag("json"))
    std::cout << json_text(session_to_json(*s));
  else
    print_session(std::cout, *s);
  if (auto path = a.value("report")) write_text_file(*path, json_text(session_to_json(*s)));
  if (auto dir = a.value("dump")) {
    const int n = dump_session(*s, *dir);
    if (!a.flag("json")) std::cout << n << " files written to " << *dir << "\n";
  }
  if (auto path = a.value("export")) {
    write_text_file(*path, json_text(case_file_to_json(make_repro(*s))));
    if (!a.flag("json")) std::cout << "repro written to " << *path << "\n";
  }
  if (script_dir && is_partitioned(s->spec())) {  // the merge of the target's partials (export_merge.h)
    const int n = export_merge_script(*s, *script_dir, script_backend);
    if (!a.flag("json"))
      std::cout << "merge script for " << script_backend << " written to " << *script_dir << "/merge.py (" << n << " files)\n";
  } else if (script_dir) {
    const int n = export_script(*s, *script_dir, script_backend);
    if (!a.flag("json"))
      std::cout << "repro script for " << script_backend << " written to " << *script_dir << "/repro.py (" << n << " files)\n";
  }
  return s->summary().exit_code();  // 0 ok, 1 FAILED, 3 NOT CHECKED (something could not be checked here)
}

Planner parse_planner(const std::string& n) {
  if (n == "flashinfer") return Planner::kFlashInfer;
  if (n == "flash_attn") return Planner::kFlashAttn;
  if (n == "fixed") return Planner::kFixed;
  if (n == "off") return Planner::kOff;
  throw UsageError("--planners: \"" + n + "\" is not a planner, must be one of flashinfer, flash_attn, fixed, off");
}

int cmd_invariance(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  InvarianceOptions opt;
  if (auto b = a.value("backend")) {
    if (!is_known_backend(*b))
      throw UsageError("--backend: \"" + *b + "\" is not a backend, must be one of " + known_backends_text());
    opt.backend = *b;
  }
  if (a.value("planners")) {
    opt.planners.clear();
    for (const auto& n : a.list_value("planners")) opt.planners.push_back(parse_planner(n));
  }
  opt.fixed_split_size = a.int_value("fixed-split-size", 1, 1 << 22);
  opt.fixed_tile_q = a.int_value("fixed-tile-q", 16, 128);
  if (opt.fixed_tile_q && *opt.fixed_tile_q != 16 && *opt.fixed_tile_q != 64 && *opt.fixed_tile_q != 128)
    throw UsageError("--fixed-tile-q: must be 16, 64 or 128");
  const auto rep = check_invariance(f.spec, opt);
  if (a.flag("json")) {
    nlohmann::ordered_json j;
    j["backend"] = rep.backend;
    j["case"] = rep.case_name;
    j["num_requests"] = rep.num_requests;
    nlohmann::ordered_json ps = nlohmann::ordered_json::array();
    for (const auto& p : rep.planners)
      ps.push_back({{"planner", planner_name(p.planner)},
                    {"note", p.note},
                    {"error", p.error},
                    {"batch_tile", p.batch_tile},
                    {"batch_chunk_pages", p.batch_chunk_pages},
                    {"alone_tile", p.alone_tile},
                    {"alone_chunk_pages", p.alone_chunk_pages},
                    {"differing_values", p.differing_values},
                    {"identical_requests", p.identical_requests()}});
    j["planners"] = ps;
    std::cout << json_text(j);
  } else {
    print_invariance(std::cout, rep);
  }
  // 3, as for a replay: nothing differed that was compared, but some planner compared nothing
  // (backend not compiled, no device, refused, or a planner the backend has no mode for).
  for (const auto& p : rep.planners)
    if (!p.error.empty()) return 3;
  return 0;
}

int cmd_consistency(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  const auto n = a.int_value("last", INT_MIN, INT_MAX);
  if (!n) throw UsageError("--last: required (consistency CASE --last N: the last N tokens of every request)");
  ConsistencyOptions opt;
  if (a.value("backends")) {
    opt.backends = a.list_value("backends");
    for (const auto& e : opt.backends)
      for (const auto& id : {consistency_pair(e).first, consistency_pair(e).second})
        if (!is_known_backend(id))
          throw UsageError("--backends: \"" + id + "\" is not a backend (an entry is an id, or PREFILL>DECODE), must be one of " +
                           known_backends_text());
  }
  opt.run = consistency_run_hook();  // the tests' fault injection; none in the product
  const bool tty = isatty(2) && !a.flag("json");
  if (tty)
    opt.progress = [](const std::string& stage, double x) {
      std::cerr << "\r  " << static_cast<int>(100 * x) << "% " << stage << std::string(20, ' ') << std::flush;
    };
  const ConsistencyReport r = check_consistency(f.spec, *n, opt);
  if (tty) std::cerr << "\r" << std::string(72, ' ') << "\r";
  if (a.flag("json"))
    std::cout << json_text(consistency_to_json(r));
  else
    print_consistency(std::cout, r);
  return r.exit_code();
}

int cmd_mla_forms(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  std::vector<std::string> ids;
  if (a.value("backends")) {
    ids = a.list_value("backends");
    for (const auto& id : ids)
      if (!is_known_backend(id))
        throw UsageError("--backends: \"" + id + "\" is not a backend, must be one of " + known_backends_text());
  }
  const MlaFormsReport r = check_mla_forms(f.spec, ids);
  print_mla_forms(std::cout, r);
  return r.exit_code();
}

// bench --plan-only: each planner's host cost per call over batch sizes (plan_cost.h)
int cmd_plan_cost(const Args& a, const CaseFile& f) {
  if (a.value("backends")) throw UsageError("--backends: bench --plan-only times the planners, not backends");
  PlanCostOptions opt;
  if (auto b = a.value("batches")) try {
      opt.batches = parse_batches(*b);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  opt.reps = a.int_value("reps", 1, 10000).value_or(20);
  const bool json = a.flag("json");
  if (isatty(2) && !json)
    opt.progress = [](int i, int n) { std::cerr << "\r  batch size " << i + 1 << " of " << n << "   " << std::flush; };
  const PlanCostReport r = run_plan_cost(nlohmann::json::parse(case_to_json(f.spec).dump()), opt);
  if (isatty(2) && !json) std::cerr << "\r" << std::string(30, ' ') << "\r";
  std::cout << (json ? json_text(plan_cost_to_json(r)) : plan_cost_table(r));
  return 0;
}

int cmd_bench(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  if (a.flag("plan-only")) return cmd_plan_cost(a, f);
  if (a.value("batches")) throw UsageError("--batches: only with --plan-only (the batch sizes the planners are timed at)");
  std::vector<std::string> ids = default_bench_backends();
  if (a.value("backends")) {
    ids = a.list_value("backends");
    for (const auto& id : ids)
      if (!is_known_backend(id))
        throw UsageError("--backends: \"" + id + "\" is not a backend, must be one of " + known_backends_text());
  }
  const int reps = a.int_value("reps", 1, 10000).value_or(20);
  const BenchReport r = run_bench(f.spec, ids, reps, a.int_value("gpus", 1, 1024).value_or(0));
  if (a.flag("json")) {
    std::cout << json_text(bench_to_json(r));
  } else {
    print_bench(std::cout, r);
  }
  // 1 when a backend raised an error, 3 when nothing was timed (no GPU, not compiled): nothing checked
  bool timed = false, error = false;
  for (const auto& row : r.rows) {
    timed |= row.status == "ok";
    error |= row.status.rfind("error", 0) == 0;
  }
  return error ? 1 : timed ? 0 : 3;
}

int cmd_sweep(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());  // the case itself must be valid
  const auto set = a.value("set");
  if (!set) throw UsageError("--set: required (sweep --set PATH=V1,V2,... or PATH=START:STOP:xFACTOR)");
  const nlohmann::json base = nlohmann::json::parse(case_to_json(f.spec).dump());
  SweepSpec spec;
  try {
    spec = prepare_sweep(base, *set);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  SweepOptions opt;
  if (a.value("backends")) {
    auto ids = a.list_value("backends");
    for (const auto& id : ids)
      if (!is_known_backend(id))
        throw UsageError("--backends: \"" + id + "\" is not a backend, must be one of " + known_backends_text());
    opt.session.backends = ids;
  }
  opt.session.bench_reps = a.int_value("reps", 1, 10000).value_or(0);
  if (isatty(2) && !a.flag("json"))
    opt.progress = [](int i, int n) { std::cerr << "\r  value " << i << " of " << n << "   " << std::flush; };
  const SweepReport r = run_sweep(base, spec, opt);
  if (isatty(2) && !a.flag("json")) std::cerr << "\r" << std::string(30, ' ') << "\r";
  if (auto path = a.value("csv")) write_text_file(*path, sweep_to_csv(r));
  if (a.flag("json"))
    std::cout << json_text(sweep_to_json(r));
  else
    print_sweep(std::cout, r);
  // as `run`: 1 when a comparison failed or a backend raised an error at some value, 3 when nothing
  // failed but a comparison was skipped; invalid values are part of the answer (the table says
  // why), not a failure, unless no value was valid: then nothing ran, and the arguments are wrong
  bool skipped = false, any_valid = false;
  for (const auto& p : r.points) any_valid |= p.error.empty();
  if (!any_valid && !r.points.empty()) {
    std::cerr << "error: --set " << spec.path << ": no value gives a valid case (each row says why), nothing ran\n";
    return 2;
  }
  for (const auto& p : r.points) {
    for (const auto& k : p.comparisons) {
      if (k.verdict == "FAIL") return 1;
      skipped |= k.verdict == "SKIP";
    }
    for (const auto& b : p.backends)
      if (b.status.rfind("error", 0) == 0) return 1;
  }
  return skipped ? 3 : 0;
}

int cmd_explain(const Args& a) {
  const CaseFile f = read_case_file(a.case_path());
  auto need = [&](const char* n) {
    const auto v = a.int_value(n, 0, 1 << 30);
    if (!v) throw UsageError(std::string("--") + n + ": required (explain needs --request, --row and --head)");
    return *v;
  };
  const int r = need("request"), q = need("row"), h = need("head");
  SoftmaxTrace t;
  try {
    t = explain_case(f.spec, r, q, h, /*sparse_checks=*/true);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (a.flag("json"))
    std::cout << json_text(trace_to_json(t));
  else
    print_trace(std::cout, t);
  return 0;
}

// Every backend the registry lists, with what its family's descriptor says it takes.
int cmd_backends() {
  for (const auto& f : backend_families()) {
    std::cout << "  family " << f.name << ": " << (f.compiled ? "compiled, " : "not compiled: ") << f.note << "\n";
    std::vector<BackendInfo> shown = f.backends;
    if (!f.id_prefix.empty()) shown.push_back(f.pattern);  // ids the user writes (python:PATH.py:FUNCTION)
    for (const auto& b : shown)
      std::cout << b.id << std::string(b.id.size() < 24 ? 24 - b.id.size() : 1, ' ') << b.summary << "\n"
                << std::string(24, ' ') << "takes: " << b.takes << "\n";
  }
  return 0;
}

int cmd_devices(const Args& a) {
  std::string why;
  const auto devs = list_devices(&why);
  if (a.flag("json")) {
    std::cout << json_text(environment_to_json(capture_environment()));
    return 0;
  }
  if (devs.empty()) std::cout << (why.rfind("no CUDA device", 0) == 0 ? why : "no CUDA devices: " + why) << "\n";
  for (const auto& d : devs)
    std::cout << d.index << ": " << d.name << ", " << d.sm_count << " SMs, compute capability " << d.cc_major << "." << d.cc_minor
              << ", " << static_cast<int>(d.memory_gib) << " GiB\n";
  // the real libraries the GPU backends run (cuDNN: the version and file loaded), mismatches named
  Environment e;
  list_libraries(&e);
  for (const auto& [name, note] : e.libraries) std::cout << name << ": " << note << "\n";
  for (const auto& m : e.library_mismatches) std::cout << "warning: " << m << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {  // a wrong call: the usage is the error message
    std::cerr << usage();
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << usage();
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::cout << "attnscope-cli " << attnscope_version() << "\n";
    return 0;
  }
  try {
    if (cmd == "validate") return cmd_validate(parse_args(argc, argv, {}, {}));
    if (cmd == "plan") return cmd_plan(parse_args(argc, argv, {"json"}, {"flex-block-mask", "engine"}));
    if (cmd == "run")
      return cmd_run(
          parse_backend_args(argc, argv, {"json"},
                             {"backends", "sample-rows", "report", "export", "dump", "export-script", "script-backend", "gpus"}));
    if (cmd == "invariance")
      return cmd_invariance(
          parse_backend_args(argc, argv, {"json"}, {"backend", "planners", "fixed-split-size", "fixed-tile-q"}));
    if (cmd == "consistency") return cmd_consistency(parse_backend_args(argc, argv, {"json"}, {"last", "backends"}));
    if (cmd == "mla-forms") return cmd_mla_forms(parse_backend_args(argc, argv, {}, {"backends"}));
    if (cmd == "bench")
      return cmd_bench(parse_backend_args(argc, argv, {"json", "plan-only"}, {"backends", "reps", "batches", "gpus"}));
    if (cmd == "sweep") return cmd_sweep(parse_backend_args(argc, argv, {"json"}, {"set", "backends", "reps", "csv"}));
    if (cmd == "explain") return cmd_explain(parse_args(argc, argv, {"json"}, {"request", "row", "head"}));
    if (cmd == "devices") return cmd_devices(parse_args(argc, argv, {"json"}, {}));
    if (cmd == "backends") {
      parse_args(argc, argv, {}, {});
      return cmd_backends();
    }
    throw UsageError("unknown command \"" + cmd +
                     "\" (commands: validate, plan, run, invariance, consistency, mla-forms, bench, sweep, explain, devices, "
                     "backends; see --help)");
  } catch (const HelpRequested&) {
    std::cout << usage();
    return 0;
  } catch (const CaseError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
