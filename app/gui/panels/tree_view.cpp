#include "tree_view.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "attnscope/mask.h"
#include "draw/colormap.h"

namespace attnscope::gui {

TreeItems build_tree_items(const Session& s, int request) {
  TreeItems t;
  const CaseSpec& c = s.spec();
  if (c.requests.empty()) return t;
  request = std::clamp(request, 0, static_cast<int>(c.requests.size()) - 1);
  const RequestSpec& rq = c.requests[request];
  t.request = request;
  t.q_len = rq.q_len;
  t.prefix = rq.kv_len - rq.q_len;
  if (rq.tree_parents.empty()) return t;
  if (rq.q_len > kMaxTreeNodes) {
    t.too_large = true;
    t.note = "request " + std::to_string(request) + "'s tree has " + std::to_string(rq.q_len) + " tokens: over the " +
             std::to_string(kMaxTreeNodes) + " this view draws; the mask below shows it";
    return t;
  }
  const int n = rq.q_len;
  t.nodes.resize(n);
  t.edges.reserve(n);
  for (int i = 0; i < n; ++i) {
    TreeNodeItem& node = t.nodes[i];
    node.token = i;
    node.parent = rq.tree_parents[i];
    // parents come before their children (validate_case), so the parent's depth is known
    node.depth = node.parent < 0 ? 0 : t.nodes[node.parent].depth + 1;
    node.position = t.prefix + i;
    node.x = static_cast<float>(node.depth + 1);
    node.y = static_cast<float>(i);
    t.max_depth = std::max(t.max_depth, node.depth);
    t.edges.push_back({node.parent, i});
  }
  // the mask over the new tokens' keys and the prefix, from the plan's bits (tree AND built-in mask)
  const RowMask& rm = s.plan.masks[request];
  t.block.assign(static_cast<size_t>(n) * n, 0);
  t.prefix_seen.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    const int qa = q_abs_of(rm, i);
    t.prefix_seen[i] = allowed_in(rm, qa, 0, t.prefix);
    for (int j = 0; j < n; ++j) t.block[static_cast<size_t>(i) * n + j] = allowed(rm, qa, t.prefix + j);
  }
  return t;
}

std::vector<int> tree_path(const TreeItems& t, int token) {
  std::vector<int> p;
  // a parent index is always earlier (validated), so the walk ends; the bound guards a bad input
  for (int i = token; i >= 0 && i < static_cast<int>(t.nodes.size()) && p.size() <= t.nodes.size(); i = t.nodes[i].parent)
    p.push_back(i);
  return p;
}

TreeGeometry tree_geometry(const TreeItems& t, float avail_h, float label_w, float prefix_w) {
  TreeGeometry g;
  g.row = std::clamp((avail_h - g.top) / std::max(1, t.q_len + 1), 6.f, 22.f);
  g.col = std::clamp(g.row * 2.6f, 10.f, 58.f);
  g.tree_w = (t.max_depth + 2) * g.col;
  g.label_x = g.tree_w + 6;
  g.label_w = label_w;
  g.block_x = g.label_x + label_w + 6;
  g.prefix_x = g.block_x + t.q_len * g.row + 12;
  g.prefix_w = std::max(prefix_w, 24.f);
  g.width = g.prefix_x + g.prefix_w + 4;
  g.height = g.row_y(t.q_len);
  return g;
}

int tree_row_at(const TreeGeometry& g, int q_len, float y) {
  if (y < g.row_y(0)) return -1;
  const int row = static_cast<int>((y - g.row_y(0)) / g.row);
  return row < q_len ? row : -1;
}

float tree_view_height(const TreeItems& t) {
  if (t.empty()) return ImGui::GetTextLineHeightWithSpacing() * 2;
  return tree_geometry(t, 1e9f, 0, 0).height + ImGui::GetTextLineHeightWithSpacing() * 2 + 8;
}

namespace {

constexpr ImU32 kAllowed = IM_COL32(253, 231, 37, 255), kMasked = IM_COL32(28, 30, 38, 255), kSome = IM_COL32(33, 145, 140, 255),
                kGrid = IM_COL32(70, 72, 84, 255), kText = IM_COL32(200, 200, 200, 255), kPath = IM_COL32(255, 150, 40, 255),
                kNode = IM_COL32(80, 120, 185, 255), kEdge = IM_COL32(120, 130, 150, 255);

std::string row_label(const TreeNodeItem& n) { return std::to_string(n.token) + "  @" + std::to_string(n.position); }

std::string prefix_label(const TreeItems& t, int i) { return std::to_string(t.prefix_seen[i]) + "/" + std::to_string(t.prefix); }

void text_centred(ImDrawList* dl, ImVec2 c, ImU32 col, const std::string& s) {
  const ImVec2 sz = ImGui::CalcTextSize(s.c_str());
  dl->AddText(ImVec2(c.x - sz.x / 2, c.y - sz.y / 2), col, s.c_str());
}

// Edges as straight lines in the gap between a parent's column and its child's: a parent's edges fan
// out at distinct angles and never cross a node.
void draw_edges(ImDrawList* dl, const TreeItems& t, const TreeGeometry& g, ImVec2 o, float r, const std::vector<int>& path) {
  for (int pass = 0; pass < 2; ++pass)  // the highlighted path last, on top
    for (const TreeEdge& e : t.edges) {
      const bool on = std::find(path.begin(), path.end(), e.child) != path.end();
      if (on != (pass == 1)) continue;
      const TreeNodeItem& ch = t.nodes[e.child];
      const ImVec2 a(o.x + (e.parent < 0 ? g.col / 2 : g.node_x(t.nodes[e.parent])) + r, o.y + g.row_y(e.parent) + g.row / 2);
      const ImVec2 b(o.x + g.node_x(ch) - r, o.y + g.row_y(e.child) + g.row / 2);
      dl->AddLine(a, b, on ? kPath : kEdge, on ? 2.5f : 1.3f);
    }
}

void draw_block(ImDrawList* dl, const TreeItems& t, const TreeGeometry& g, ImVec2 o, int active, const std::vector<int>& path) {
  const int n = t.q_len;
  const float x0 = o.x + g.block_x, y0 = o.y + g.row_y(0), cs = g.row;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const ImVec2 a(x0 + j * cs, y0 + i * cs);
      dl->AddRectFilled(a, ImVec2(a.x + cs, a.y + cs), t.block[static_cast<size_t>(i) * n + j] ? kAllowed : kMasked);
    }
  if (cs >= 8)
    for (int i = 0; i <= n; ++i) {
      dl->AddLine(ImVec2(x0, y0 + i * cs), ImVec2(x0 + n * cs, y0 + i * cs), kGrid);
      dl->AddLine(ImVec2(x0 + i * cs, y0), ImVec2(x0 + i * cs, y0 + n * cs), kGrid);
    }
  // column numbers in row -1, every step-th so that they do not overlap
  const int step = std::max(1, static_cast<int>(ImGui::CalcTextSize("000").x / cs) + 1);
  for (int j = 0; j < n; j += step)
    text_centred(dl, ImVec2(x0 + (j + 0.5f) * cs, o.y + g.row_y(-1) + cs / 2), kText, std::to_string(j));
  // the keys the active token sees among the new tokens: its own column and its ancestors'
  for (int a : path) {
    dl->AddRectFilled(ImVec2(x0 + a * cs, y0), ImVec2(x0 + (a + 1) * cs, y0 + n * cs), IM_COL32(255, 150, 40, 60));
    dl->AddRect(ImVec2(x0 + a * cs, y0), ImVec2(x0 + (a + 1) * cs, y0 + n * cs), kPath, 0, 0, 1.5f);
  }
  // the prefix column: how many prefix keys each row sees
  const float px = o.x + g.prefix_x;
  for (int i = 0; i < n; ++i) {
    const ImVec2 a(px, y0 + i * cs), b(px + g.prefix_w, y0 + (i + 1) * cs - (cs >= 8 ? 1 : 0));
    const int seen = t.prefix_seen[i];
    dl->AddRectFilled(a, b, seen == t.prefix && t.prefix > 0 ? kAllowed : seen > 0 ? kSome : kMasked);
    if (cs >= 13)
      text_centred(dl, ImVec2((a.x + b.x) / 2, (a.y + b.y) / 2), seen > 0 ? IM_COL32(20, 20, 20, 255) : kText,
                   prefix_label(t, i));
  }
  if (active >= 0) {  // the active row across the block and the prefix column
    const float y = y0 + active * cs;
    dl->AddRect(ImVec2(x0 - 2, y - 1), ImVec2(x0 + n * cs + 2, y + cs + 1), IM_COL32(255, 255, 255, 255), 0, 0, 2.f);
    dl->AddRect(ImVec2(px - 2, y - 1), ImVec2(px + g.prefix_w + 2, y + cs + 1), IM_COL32(255, 255, 255, 255), 0, 0, 2.f);
  }
}

}  // namespace

int draw_tree_view(const TreeItems& t, int* selected, float avail_h) {
  if (t.too_large) {
    ImGui::TextWrapped("%s", t.note.c_str());
    return -1;
  }
  if (t.empty()) return -1;
  ImGui::PushTextWrapPos(0.f);
  ImGui::Text(
      "Tree: %d new tokens at positions [%d, %d) over a prefix of %d keys, depth up to %d. A token sees the prefix, itself "
      "and its ancestors, ANDed with the case's other masks (the prefix column counts the prefix keys it keeps). Hover a "
      "node or row to show the keys it sees (orange), click to keep it.",
      t.q_len, t.prefix, t.prefix + t.q_len, t.prefix, t.max_depth);
  ImGui::PopTextWrapPos();
  float label_w = 0, prefix_w = 0;
  for (int i = 0; i < t.q_len; ++i) {
    label_w = std::max(label_w, ImGui::CalcTextSize(row_label(t.nodes[i]).c_str()).x);
    prefix_w = std::max(prefix_w, ImGui::CalcTextSize(prefix_label(t, i).c_str()).x + 10);
  }
  prefix_w = std::max(prefix_w, ImGui::CalcTextSize("prefix").x + 4);
  TreeGeometry g = tree_geometry(t, avail_h - (ImGui::GetCursorPosY() - ImGui::GetCursorStartPos().y), label_w, prefix_w);
  if (g.row < 13) g = tree_geometry(t, g.height, 0, 0);  // rows too small for text: no labels, no counts
  const ImVec2 o = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("tree", ImVec2(g.width, g.height));
  const bool over = ImGui::IsItemHovered();
  int hovered = -1;
  if (over) {
    hovered = tree_row_at(g, t.q_len, ImGui::GetIO().MousePos.y - o.y);
    if (hovered >= 0 && ImGui::IsItemClicked()) *selected = hovered;
  }
  const int active = hovered >= 0 ? hovered : (*selected >= 0 && *selected < t.q_len ? *selected : -1);
  const std::vector<int> path = tree_path(t, active);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // titles above the columns
  dl->AddText(ImVec2(o.x + 2, o.y), kText, "tree");
  if (g.label_w > 0) dl->AddText(ImVec2(o.x + g.label_x, o.y), kText, "i  @pos");
  const std::string keys = "keys " + std::to_string(t.prefix) + " + j";
  dl->AddText(ImVec2(o.x + g.block_x, o.y), kText, keys.c_str());
  dl->AddText(ImVec2(o.x + g.prefix_x + 2, o.y), kText, "prefix");
  draw_block(dl, t, g, o, active, path);
  const float r = std::max(3.f, std::min(g.row * 0.45f, g.col * 0.4f));
  draw_edges(dl, t, g, o, r, path);
  // the prefix root, then the nodes on their rows
  const ImVec2 root(o.x + g.col / 2, o.y + g.row_y(-1) + g.row / 2);
  dl->AddRectFilled(ImVec2(root.x - r, root.y - r), ImVec2(root.x + r, root.y + r), IM_COL32(150, 150, 160, 255), 3.f);
  if (r >= 7) text_centred(dl, root, IM_COL32(20, 20, 20, 255), "P");
  if (g.label_w > 0) {  // rows tall enough for text
    std::string what = "the prefix, keys [0, " + std::to_string(t.prefix) + ")";
    if (root.x + r + 6 + ImGui::CalcTextSize(what.c_str()).x > o.x + g.block_x - 6) what = "prefix";  // a shallow tree
    dl->AddText(ImVec2(root.x + r + 6, root.y - ImGui::GetTextLineHeight() / 2), kText, what.c_str());
  }
  for (const TreeNodeItem& n : t.nodes) {
    const ImVec2 c(o.x + g.node_x(n), o.y + g.row_y(n.token) + g.row / 2);
    const bool on = std::find(path.begin(), path.end(), n.token) != path.end();
    dl->AddCircleFilled(c, r, on ? kPath : kNode);
    if (n.token == active) dl->AddCircle(c, r + 1.5f, IM_COL32(255, 255, 255, 255), 0, 2.f);
    if (r >= 7 && n.token < 100)
      text_centred(dl, c, on ? IM_COL32(20, 20, 20, 255) : IM_COL32(240, 240, 240, 255), std::to_string(n.token));
    if (g.label_w > 0)
      dl->AddText(ImVec2(o.x + g.label_x, c.y - ImGui::GetTextLineHeight() / 2),
                  n.token == active ? IM_COL32(255, 255, 255, 255) : kText, row_label(n).c_str());
  }
  if (hovered >= 0) {
    const TreeNodeItem& n = t.nodes[hovered];
    std::string anc;
    for (size_t i = 1; i < path.size(); ++i) anc += (i > 1 ? ", " : "") + std::to_string(path[i]);
    ImGui::BeginTooltip();
    ImGui::Text("new token %d at position %d, depth %d, parent %s", n.token, n.position, n.depth,
                n.parent < 0 ? "the prefix" : std::to_string(n.parent).c_str());
    ImGui::Text("ancestors: %s", anc.empty() ? "none (attached to the prefix)" : anc.c_str());
    ImGui::Text("sees %d of the %d prefix keys and %zu of the new tokens' keys", t.prefix_seen[hovered], t.prefix,
                static_cast<size_t>(std::count(t.block.begin() + static_cast<size_t>(hovered) * t.q_len,
                                               t.block.begin() + static_cast<size_t>(hovered + 1) * t.q_len, 1)));
    ImGui::EndTooltip();
  }
  return hovered;
}

std::vector<int> draw_tree_child(const TreeItems& t, int* selected, float room) {
  if (t.empty() && !t.too_large) return {};
  const float h = std::min(tree_view_height(t) + 2 * ImGui::GetStyle().WindowPadding.y, room * 0.7f);
  ImGui::BeginChild("treeview", ImVec2(0, h), true, ImGuiWindowFlags_HorizontalScrollbar);
  const int hovered = draw_tree_view(t, selected, ImGui::GetContentRegionAvail().y);
  ImGui::EndChild();
  return tree_path(t, hovered >= 0 ? hovered : *selected);
}

void draw_tree_path_on_mask(ImDrawList* dl, const TreeItems& t, const std::vector<int>& path, ImVec2 p0, ImVec2 size) {
  if (path.empty()) return;
  const float sy = size.y / std::max(1, t.q_len), sx = size.x / std::max(1, t.prefix + t.q_len);
  const float y = p0.y + path.front() * sy;
  dl->AddRect(ImVec2(p0.x - 1, y - 1), ImVec2(p0.x + size.x + 1, y + std::max(sy, 1.f) + 1), IM_COL32(255, 255, 255, 230), 0, 0,
              1.5f);
  for (int a : path) {
    const float x = p0.x + (t.prefix + a) * sx;
    dl->AddRectFilled(ImVec2(x, p0.y), ImVec2(x + std::max(sx, 1.f), p0.y + size.y), IM_COL32(255, 150, 40, 170));
  }
}

}  // namespace attnscope::gui
