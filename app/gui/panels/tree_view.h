// Tree view of the Mask tab: a request's speculative-decoding tree (/requests/i/tree_parents,
// docs/conventions.md section 12) beside the mask over its new tokens' keys. Node i sits on the row of
// new token i (depth = its ancestor count, one column per depth, the prefix as the root); hovering a
// node or a row highlights the row and the columns of the token and its ancestors, the keys it sees.
#pragma once

#include <imgui.h>

#include <cstdint>
#include <string>
#include <vector>

#include "session.h"

namespace attnscope::gui {

struct TreeNodeItem {
  int token = 0;       // index among the request's new tokens
  int parent = -1;     // -1: attached to the prefix
  int depth = 0;       // ancestors among the new tokens (parent, parent's parent, ...)
  int position = 0;    // absolute position P + token
  float x = 0, y = 0;  // layout in cells: column depth + 1 (the prefix root is column 0), row = token
};

struct TreeEdge {
  int parent = -1, child = 0;  // parent -1: the prefix root
};

struct TreeItems {
  int request = 0, q_len = 0, prefix = 0;  // prefix P = kv_len - q_len: keys before the new tokens
  bool too_large = false;                  // q_len over kMaxTreeNodes: not drawn, `note` says so
  std::string note;
  std::vector<TreeNodeItem> nodes;  // one per new token, in token order; empty without a tree
  std::vector<TreeEdge> edges;      // one per node: to its parent or to the prefix root
  int max_depth = 0;
  std::vector<uint8_t> block;    // [q_len * q_len]: token i sees new token j's key P + j (the plan's bits)
  std::vector<int> prefix_seen;  // per token: prefix keys [0, P) it sees (a window hides some)
  bool empty() const { return nodes.empty(); }
};

constexpr int kMaxTreeNodes = 1024;  // the block is q_len^2 bytes and a cell per pair is drawn

// The tree of `request` from its tree_parents and the plan's mask bits; empty without tree_parents.
TreeItems build_tree_items(const Session& s, int request);

// `token`, its parent, ... up to the token attached to the prefix; empty for a token out of range.
std::vector<int> tree_path(const TreeItems& t, int token);

// Pixel geometry, left to right: the tree's depth columns, the row labels, the block of new-token
// keys (square cells), the prefix column. Row -1 (the prefix root's) holds the block's column numbers.
struct TreeGeometry {
  float top = 18;  // column titles above row -1
  float row = 22;  // row height = block cell size
  float col = 58;  // width of one depth column of the tree
  float tree_w = 0, label_x = 0, label_w = 0, block_x = 0, prefix_x = 0, prefix_w = 0, width = 0, height = 0;
  float node_x(const TreeNodeItem& n) const { return n.x * col + col / 2; }
  float row_y(int token) const { return top + (token + 1) * row; }  // top edge of token's row (-1: root)
};
// `avail_h`: height for the rows; label_w / prefix_w: the measured widths of the widest row label and
// prefix count (0: none drawn, rows too small for text).
TreeGeometry tree_geometry(const TreeItems& t, float avail_h, float label_w, float prefix_w);

// The token whose row holds local y (pixels from the view's top), -1 above or below the rows: what
// hovering or clicking anywhere on a row (node, label, block, prefix count) picks.
int tree_row_at(const TreeGeometry& g, int q_len, float y);

// The height the view wants (rows at full size, plus its caption).
float tree_view_height(const TreeItems& t);

// Draws the caption and the view at the cursor, rows fitted to `avail_h`; `selected` (in / out): the
// clicked token, highlighted while nothing is hovered. Returns the token under the mouse, or -1.
int draw_tree_view(const TreeItems& t, int* selected, float avail_h);

// The view in a child window at most 70% of `room` tall (nothing without a tree); returns the
// highlighted path (hovered token, else the selected one), empty when none.
std::vector<int> draw_tree_child(const TreeItems& t, int* selected, float room);

// On the whole mask drawn at p0 with `size` (q_len rows x (prefix + q_len) keys): the path's first
// token's row outlined and the path's key columns filled, so the tree's highlight shows there too.
void draw_tree_path_on_mask(ImDrawList* dl, const TreeItems& t, const std::vector<int>& path, ImVec2 p0, ImVec2 size);

}  // namespace attnscope::gui
