// DeepSeek sparse attention (/sparse, docs/dsa.md) in the GUI: what the Mask, Pages and Softmax tabs
// draw of a query row's selection. The dense softmax mass needs the row's Q and every visible key's K
// (MLA's derived rows, mla.h), so it is computed on a worker (SparseRowJob), never in a frame.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/plan.h"

namespace attnscope::gui {

// What one multiply-add budget allows: the mass of one head over a row costs visible keys x head_dim
// (x qk_nope_dim x kv_lora_rank more for the non-absorbed form's K rows); rows or heads past it are
// left out and said so. 2^28 is about 0.3 s of one core.
constexpr int64_t kSparseMassMacs = int64_t{1} << 28;
// The Softmax tab's every-head recall of one row: 2^30 covers DeepSeek-V3.2's 128 heads over 8192 keys
// (about a second of one core, on its worker, while the tab says "computing").
constexpr int64_t kSparseHeadsMacs = int64_t{1} << 30;
int64_t sparse_head_macs(const CaseSpec& c, int visible);

// One query row's selection and the dense fp64 softmax mass of its keys.
struct SparseRow {
  int request = 0, query = 0, q_abs = 0;
  int visible = 0;  // keys the causal mask lets the row see, [0, q_abs]
  int top_k = 0, kept = 0, padding = 0, nans = 0;
  bool given = false;            // /sparse/indices, no indexer
  std::vector<uint8_t> is_kept;  // [visible]
  int head = 0;                  // the head `mass` is of
  std::vector<double> mass;      // [visible]: head `head`'s dense softmax over the visible keys (empty: not computed)
  double kept_mass = 0;          // recall of mass of `head`: sum of `mass` over the kept keys
  std::vector<double> recall;    // per head 0 .. recall.size() - 1 (all_heads; fewer past the budget)
  int heads = 0;                 // the case's query heads
};

// The row's selection (cheap: the plan's indices) and, with `with_mass`, head `head`'s mass; with
// `all_heads`, every head's recall the budget allows. Pure: the tests call it directly.
// `sel`: request r's selection (Plan::sparse).
SparseRow sparse_row(const CaseSpec& c, const SparseSelection& sel, int r, int q, int head, bool with_mass,
                     bool all_heads = false);

// The selected slots of a row in the pool (Pages tab): logical index -> physical slot through the
// page table (sparse_slot); a slot whose page the request does not own, or an index past kv_len, is
// an index bug, drawn in the warning colour.
struct SparseSlots {
  int request = 0, query = 0, page_size = 1;
  int kept = 0, padding = 0, outside = 0;
  std::vector<int> page_count;        // [num_pages]: selected slots in each page
  std::vector<uint8_t> page_outside;  // [num_pages]: a slot of another owner's page selected there
  std::vector<int> first_idx;         // the first few kept entries (rank order), for the legend
  std::vector<int64_t> first_slot;    // their slots (-1: outside the page table)
  int pages_touched = 0;
  // the request's pages in key order (its page-table row, at most kMaxSlotPages) and, per logical token
  // of them, whether it is selected: the slot grid
  std::vector<int> table;
  int kv_len = 0;
  std::vector<uint8_t> slot_selected;  // [table.size() * page_size]
};
constexpr int kMaxSlotPages = 512;
// `row`: top_k entries (logical indices, -1 padding) of query `q` of request `r`.
SparseSlots sparse_slots_of_row(const PageTable& pt, int r, int q, const int* row, int top_k);

// The Mask tab's pooled grid for a /sparse request: per cell of build_mask_items' grid, whether a key
// there is kept, only causally visible (dropped), or neither; with the mass of the rows computed.
struct SparseMaskItems {
  int request = 0, rows = 0, cols = 0, q_per_cell = 1, k_per_cell = 1;
  std::vector<uint8_t> cls;  // [rows * cols]: 0 masked, 1 visible but dropped, 2 kept
  std::vector<float> mass;   // [rows * cols]: the kept keys' mass in the cell, mean over its rows with mass (NaN: none)
  int head = 0;
  int rows_with_mass = 0;  // query rows whose mass was computed (under the budget)
  SparseRow row;           // the explained row (legend and strip)
};
SparseMaskItems build_sparse_mask_items(const CaseSpec& c, const SparseSelection& sel, int r, int explained_q, int head,
                                        int max_cells = 512);

// A worker's answer for a key; the panels poll it each frame (nothing here blocks). One job runs at a
// time: a key asked meanwhile waits and starts when the running one is done (a std::async future
// dropped unfinished would block the frame in its destructor).
template <class T>
class SparseJob {
 public:
  // Whether `key` differs from the last one asked: only then is a job's closure (a copy of the case) made.
  bool is_new(const std::string& key) const { return key != key_; }
  // Asks for `fn`'s answer under `key` (asked when is_new); the old answer stays shown until it is done.
  void want(const std::string& key, std::function<T()> fn) {
    key_ = key;
    next_ = std::move(fn);
    start_if_idle();
  }
  // Takes a finished answer; true when the shown one changed.
  bool poll() {
    bool changed = false;
    if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        value_ = std::make_shared<T>(pending_.get());
        error_.clear();
      } catch (const std::exception& e) {
        value_.reset();
        error_ = e.what();
      }
      changed = true;
    }
    start_if_idle();
    return changed;
  }
  bool busy() const { return pending_.valid() || static_cast<bool>(next_); }
  const T* value() const { return value_.get(); }
  const std::string& error() const { return error_; }

 private:
  void start_if_idle() {
    if (pending_.valid() || !next_) return;
    pending_ = std::async(std::launch::async, std::move(next_));
    next_ = nullptr;
  }
  std::string key_;
  std::function<T()> next_;
  std::future<T> pending_;
  std::shared_ptr<T> value_;
  std::string error_;
};

// A job's key for a snapshot: the case as text with the selection's indices left out (an engine's
// buffer can be large) and the plan's selection pointer standing for them. Made once per snapshot.
std::string sparse_case_key(const CaseSpec& c, const Plan& p);

}  // namespace attnscope::gui
