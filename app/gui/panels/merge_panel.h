// Merge panel (issue 44, docs/partitions.md): a /parallel case's partitions and how their partials
// merge. Per request the key axis coloured by partition (context rank or cascade level); for one
// (token, head) row each partial's share of the attention mass, the weight the merge gave it and its
// error against the reference's partial over the same keys, and the merged error; per backend the LSE
// base it was read in beside its own with the base check; the merges run and the timings, the
// collective's beside the kernels'. The numbers are built here (merge_data.cpp, testable without a
// window); merge_panel.cpp draws them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

// The line a case without /parallel shows instead: what /parallel is, and where it is documented.
extern const char* const kNotPartitionedLine;

// Keys of request r in [k0, k1) per partition (partition_of_key's partitions, counted without a
// loop over the keys: a bar drawn per pixel column of a long request asks once per column).
std::vector<int64_t> keys_in(const CaseSpec& c, int r, int64_t k0, int64_t k1);

struct MergeLayout {
  bool partitioned = false;
  std::string title;                       // "context parallel: 4 ranks, interleave 16 (...)", "cascade: ..."
  std::vector<std::string> labels;         // [partitions] "rank 0", "level 0: shared prefix"
  std::vector<std::vector<int64_t>> keys;  // [requests][partitions] keys of each request in each partition
};
MergeLayout build_merge_layout(const CaseSpec& c);

// One partial of one backend, for the row shown.
struct MergePartial {
  int64_t keys = 0;   // keys of the row's request in this partition (0: an empty partial)
  float lse = 0;      // its natural-log LSE (-inf: no key)
  double share = 0;   // its share of the row's attention mass: exp(lse - LSE) (0 for -inf)
  double weight = 0;  // the weight the merge gave it, reading its LSE in the base the merge assumed
  double err = -1;    // max over head_dim |O_k - O_ref,k|; -1: not known (no reference partial, or the reference itself)
  bool weight_differs = false;  // weight and share differ beyond rounding: the merge read the wrong base
};

struct MergeRowBackend {
  std::string backend;
  bool reference = false;  // the reference: its answer is the unpartitioned run, its partials beside it
  bool stale = false, sampled = false;
  bool computed = true;  // the row was computed (a sampled run leaves rows out)
  std::vector<MergePartial> parts;
  double lse_mass = 0;       // LSE of the partials' summed mass (natural log): the right merge's LSE
  float lse_result = 0;      // the LSE the result holds (the merge's; a reference's unpartitioned one)
  bool lse_differs = false;  // the result's LSE is not the partials' mass: a merge in the wrong base
  double merged_err = -1;    // max over head_dim |O - O_ref|; -1: the reference itself, or not computed
};

struct MergeRowItems {
  int64_t token = 0;
  int head = 0, request = 0, query = 0;
  std::string reference;  // the reference's id ("" when it did not run: no errors then)
  bool reference_computed = true;
  std::vector<MergeRowBackend> backends;  // the partitioned results, in the case's order
};
MergeRowItems build_merge_row(const Session& s, int request, int query, int head);

// The (request, query, head) of the row with the largest merged error against the reference, over
// every partitioned backend and every row both computed; (0, 0, 0) when nothing was compared.
struct RowPick {
  int request = 0, query = 0, head = 0;
  double err = 0;
  std::string backend;  // whose error it is
};
RowPick worst_merged_row(const Session& s);

// Per backend: the LSE base its partials were read in beside its own, and the base check.
struct MergeBaseRow {
  std::string backend;
  std::string native, read;  // "e", "2"
  bool mismatch = false;     // read != native: the base-mix bug
  bool checked = false;      // the base check ran (Session::merge_checks)
  double err_e = 0, err_2 = 0;
  std::string verdict;
  bool check_disagrees = false;  // the check's better base is not the backend's own: its descriptor is wrong
  bool stale = false;            // the check is the previous edit's
  bool sampled = false;          // the check covers the sampled rows only
};

struct MergeTimingRow {
  std::string backend;
  bool stale = false, sampled = false;
  std::vector<double> part_ms;  // [partitions] each partition's kernel time (device when measured, else host)
  bool device = false;          // part_ms are device times
  double merge_ms = 0;          // attnscope's merge (host)
  std::string collective;       // where the ranks ran and how the partials met
  double collective_ms = 0;
  std::vector<MergeRun> merges;  // without o / lse
};

struct MergeItems {
  MergeLayout layout;
  std::string reference;  // the reference's id: its partials are the ones the others are checked against
  std::vector<MergeBaseRow> bases;
  std::vector<MergeTimingRow> timings;
  double max_ms = 0;                       // the longest backend's partitions + merge + collective
  std::vector<std::string> unpartitioned;  // "cpu.lowp: runs the whole case (...)", "cuda.flash: not compiled"
};
MergeItems build_merge_items(const Session& s);

class MergePanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  void draw_keys(const Session& s);
  void draw_row(const Session& s, UiState& ui);
  void draw_bases();
  void draw_timings();

  const Session* built_for_ = nullptr;
  MergeItems items_;
  RowPick worst_;
};

}  // namespace attnscope::gui
