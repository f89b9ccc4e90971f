// The Pages tab's MLA view: mla_view.h.
#include "mla_view.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "attnscope/plan.h"

namespace attnscope::gui {

MlaLayoutItems build_mla_layout(const Session& s) {
  MlaLayoutItems it;
  const CaseSpec& c = s.spec();
  if (!c.mla) return it;
  const MlaSpec& m = *c.mla;
  it.mla = true;
  it.absorbed = m.absorbed;
  it.rank = m.kv_lora_rank;
  it.rope = m.rope_dim;
  it.nope = m.qk_nope_dim;
  it.vdim = m.v_head_dim;
  it.heads = c.num_qo_heads;
  it.elem_bytes = dtype_bytes(c.dtype);
  it.latent_bytes = static_cast<int64_t>(m.latent_dim()) * it.elem_bytes;
  it.per_head_bytes = static_cast<int64_t>(c.num_qo_heads) * (m.qk_nope_dim + m.rope_dim + m.v_head_dim) * it.elem_bytes;
  it.kernel_bytes = c.kv_bytes_per_token(it.elem_bytes);
  it.tokens = static_cast<int64_t>(s.plan.pages.num_pages) * s.plan.pages.page_size;
  it.ratio = static_cast<double>(it.per_head_bytes) / static_cast<double>(it.latent_bytes);
  return it;
}

namespace {

// A horizontal bar of `dims` elements split into labelled parts, `width` pixels for the whole row.
void segment(ImDrawList* dl, ImVec2 p, float w, float h, ImU32 col, const char* label) {
  dl->AddRectFilled(p, ImVec2(p.x + w - 1, p.y + h), col);
  const ImVec2 ts = ImGui::CalcTextSize(label);
  if (ts.x < w - 4) dl->AddText(ImVec2(p.x + (w - ts.x) / 2, p.y + (h - ts.y) / 2), IM_COL32(20, 20, 20, 255), label);
}

std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, bytes >= 1 << 20 ? "%.1f MiB" : "%.1f KiB", bytes / (bytes >= 1 << 20 ? 1048576.0 : 1024.0));
  return b;
}

}  // namespace

void draw_mla_layout(const MlaLayoutItems& it) {
  if (!it.mla) return;
  ImGui::TextWrapped(
      "MLA latent cache (%s form): one row per token, [ckv %d ; kpe %d] = %d elements, %lld bytes, shared by all %d query heads",
      it.absorbed ? "absorbed" : "non-absorbed", it.rank, it.rope, it.rank + it.rope, static_cast<long long>(it.latent_bytes),
      it.heads);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float full = std::max(200.f, ImGui::GetContentRegionAvail().x - 20), h = 20;
  const float px = full / static_cast<float>(it.rank + it.rope);
  ImVec2 p = ImGui::GetCursorScreenPos();
  char lab[64];
  std::snprintf(lab, sizeof lab, "ckv: %d dims (V of the absorbed form)", it.rank);
  segment(dl, p, it.rank * px, h, IM_COL32(110, 170, 230, 255), lab);
  std::snprintf(lab, sizeof lab, "kpe: %d", it.rope);
  if (it.rope) segment(dl, ImVec2(p.x + it.rank * px, p.y), it.rope * px, h, IM_COL32(235, 180, 90, 255), lab);
  p.y += h + 3;
  segment(dl, p, (it.rank + it.rope) * px, 6, IM_COL32(200, 200, 200, 255), "");  // K of the absorbed form: the whole row
  ImGui::Dummy(ImVec2(full, h + 12));
  if (it.absorbed)
    ImGui::TextWrapped(
        "Absorbed: K is the whole row (%d dims), V its ckv part (%d): a kernel reads each token's latent once for "
        "both. Query heads are rows of one latent head (GQA group %d).",
        it.rank + it.rope, it.rank, it.heads);
  else
    ImGui::TextWrapped(
        "Non-absorbed: per head K = [W_uk ckv ; kpe] (%d + %d dims) and V = W_uv ckv (%d), up-projected from "
        "the latent; the kernel reads %lld bytes per token, the cache stores %lld.",
        it.nope, it.rope, it.vdim, static_cast<long long>(it.kernel_bytes), static_cast<long long>(it.latent_bytes));
  ImGui::Text("per token: latent %lld B | the same model as per-head K and V (%d x (%d + %d) x %d B): %lld B, %.0fx more",
              static_cast<long long>(it.latent_bytes), it.heads, it.nope + it.rope, it.vdim, it.elem_bytes,
              static_cast<long long>(it.per_head_bytes), it.ratio);
  ImGui::Text("this pool (%lld token slots): latent %s, as per-head K and V %s", static_cast<long long>(it.tokens),
              mib(static_cast<double>(it.tokens) * it.latent_bytes).c_str(),
              mib(static_cast<double>(it.tokens) * it.per_head_bytes).c_str());
  ImGui::Separator();
}

}  // namespace attnscope::gui
