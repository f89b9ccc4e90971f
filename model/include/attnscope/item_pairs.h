// Work items that one GPU CTA can run side by side (the flash kernel's paired Hopper launch): a launch-level
// grouping of the plan's items that changes no item, tile or sum, only which items share the K / V
// tiles a CTA loads.
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "attnscope/split_plan.h"

namespace attnscope {

// Two items of one CTA: b = -1 when `a` runs alone.
struct ItemPair {
  int a = 0, b = -1;
};

// Pairs each item with the one whose rows come right after its own in the same unit and KV chunk
// with the same keys (kv_begin and kv_end: the same 64-key tile grid), in the items' order; an item
// with no such partner runs alone. Every item appears exactly once. Inline: the CUDA library calls it
// and sits before the plan library on the link line.
inline std::vector<ItemPair> pair_items(const std::vector<WorkItem>& items) {
  // (unit, chunk, first row) -> item: the partner of an item is the one starting at its row_end
  std::map<std::tuple<int, int, int>, int> by_start;
  for (size_t i = 0; i < items.size(); ++i)
    by_start.emplace(std::make_tuple(items[i].unit, items[i].kv_chunk, items[i].row_begin), static_cast<int>(i));
  std::vector<char> taken(items.size(), 0);
  std::vector<ItemPair> pairs;
  for (size_t i = 0; i < items.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = 1;
    ItemPair pr{static_cast<int>(i), -1};
    const WorkItem& a = items[i];
    const auto f = by_start.find(std::make_tuple(a.unit, a.kv_chunk, a.row_end));
    if (f != by_start.end() && a.row_end > a.row_begin && !taken[f->second]) {
      const WorkItem& b = items[f->second];
      if (b.kv_begin == a.kv_begin && b.kv_end == a.kv_end && b.row_end > b.row_begin) {
        pr.b = f->second;
        taken[f->second] = 1;
      }
    }
    pairs.push_back(pr);
  }
  return pairs;
}

}  // namespace attnscope
