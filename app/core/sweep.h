// Parameter sweeps (`attnscope-cli sweep`, the GUI's Sweep tab): one case path set to each of a list
// of values, the case re-validated, planned and run for every value, and per value the plan's
// figures, every backend's time and the comparisons' statistics.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "case_json.h"
#include "session.h"

namespace attnscope {

// What to sweep: a JSON path of the case ("/requests/*/kv_len": "*" stands for every element of an
// array; a last segment "#" is the array's length: "/requests/#" is the batch size, the requests
// cut or extended with copies of the last one) and its values.
struct SweepSpec {
  std::string path;
  std::vector<nlohmann::json> values;
};

// "PATH=V1,V2,..." (each value JSON if it parses, else a string; a comma inside "...", (...), [...]
// or {...} is part of its value) or "PATH=START:STOP:xFACTOR" (geometric) or "PATH=START:STOP:+STEP"
// (arithmetic), both inclusive of STOP when reached; at most 10000 values either way.
// Throws std::invalid_argument naming the rule broken.
SweepSpec parse_sweep_set(const std::string& arg);

// parse_sweep_set, then a check that the path exists in `base` (the case JSON) and in the case
// format (a key it does not have is refused, not created), so a typo fails before anything runs.
// Throws std::invalid_argument.
SweepSpec prepare_sweep(const nlohmann::json& base, const std::string& arg);

// Sets every location `path` names in `j` to `value`; creates missing object keys on the way.
// Throws std::invalid_argument naming the path and why it does not exist.
void set_case_path(nlohmann::json& j, const std::string& path, const nlohmann::json& value);

struct SweepBackend {
  std::string backend, status, digest;  // status "ok" or the reason; digest of the output bits
  double host_ms = 0, device_ms = 0;    // device_ms: CUDA events (GPU backends, reps > 0), else 0
  double tflops = 0, gbps = 0;          // from device_ms when timed, else host_ms
};

struct SweepComparison {
  std::string name;     // "backend vs baseline (rule)", as `run` labels it (comparison_label)
  std::string verdict;  // "PASS", "FAIL" or "SKIP"
  double max_abs = 0, rel_l2 = 0;
};

struct SweepPoint {
  nlohmann::json value;
  std::string error;  // the case is invalid with this value (the CaseError), nothing ran
  int tile = 0, chunk_pages = 0, items = 0, padded_items = 0;
  bool split_kv = false;
  double plan_us = 0;
  std::vector<SweepBackend> backends;
  std::vector<SweepComparison> comparisons;
};

struct SweepReport {
  std::string case_name, path;
  nlohmann::json base;  // the case swept (its JSON): a point's case is base with path set to its value
  std::vector<SweepPoint> points;
};

struct SweepOptions {
  SessionOptions session;  // backends, sample_rows, bench_reps (CUDA-event timing of GPU backends)
  std::function<void(int point, int points)> progress;
  const std::atomic<bool>* cancel = nullptr;
};

// Runs the sweep on `base` (the case file's JSON). Invalid points are reported, not thrown.
SweepReport run_sweep(const nlohmann::json& base, const SweepSpec& spec, const SweepOptions& opt);

std::string sweep_to_csv(const SweepReport& r);              // one header line, one line per point
nlohmann::ordered_json sweep_to_json(const SweepReport& r);  // schema attnscope/sweep@1

// Reads what sweep_to_json wrote (a sweep run elsewhere, e.g. on a GPU machine, to draw here).
// Throws std::invalid_argument naming the JSON path of a missing or mistyped field.
SweepReport sweep_from_json(const nlohmann::json& j);

}  // namespace attnscope
