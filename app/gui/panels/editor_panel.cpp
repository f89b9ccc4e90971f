#include "editor_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "desktop.h"

namespace attnscope::gui {

std::vector<RequestSpec> generate_requests(const GeneratorSettings& g) {
  SplitMix64 rng(g.seed * 0x9e3779b97f4a7c15ull + 7);
  std::vector<RequestSpec> out;
  for (int i = 0; i < std::max(1, g.count); ++i) {
    RequestSpec r;
    r.kv_len = rng.range(std::max(1, g.kv_min), std::max(g.kv_min, g.kv_max));
    if (g.kind == 1)
      r.q_len = 1;
    else if (g.kind == 2)
      r.q_len = r.kv_len;
    else
      r.q_len = std::min(r.kv_len, rng.range(std::max(1, g.q_min), std::max(g.q_min, g.q_max)));
    out.push_back(r);
  }
  return out;
}

namespace {

// "0 100 180" -> {0, 100, 180}; stops at the first token that is not an integer (validation then
// names whatever is wrong with the list).
std::vector<int> parse_int_list(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == ',')) ++pos;
    if (pos >= text.size()) break;
    size_t used = 0;
    try {
      out.push_back(std::stoi(text.substr(pos), &used));
    } catch (...) {
      break;
    }
    pos += used;
  }
  return out;
}

template <class E>
bool combo(const char* label, E& v, std::initializer_list<std::pair<const char*, E>> items) {
  const char* cur = "?";
  for (const auto& [n, e] : items)
    if (e == v) cur = n;
  bool changed = false;
  if (ImGui::BeginCombo(label, cur)) {
    for (const auto& [n, e] : items)
      if (ImGui::Selectable(n, e == v)) {
        changed = e != v;
        v = e;
      }
    ImGui::EndCombo();
  }
  return changed;
}

bool opt_int(const char* label, std::optional<int>& v, int def, int lo, int hi) {
  bool on = v.has_value(), changed = false;
  ImGui::PushID(label);
  if (ImGui::Checkbox("##on", &on)) {
    v = on ? std::optional<int>(def) : std::nullopt;
    changed = true;
  }
  ImGui::SameLine();
  if (on) {
    int x = *v;
    if (ImGui::InputInt(label, &x)) {
      v = std::clamp(x, lo, hi);
      changed = true;
    }
  } else {
    ImGui::TextDisabled("%s (off)", label);
  }
  ImGui::PopID();
  return changed;
}

bool opt_double(const char* label, std::optional<double>& v, double def) {
  bool on = v.has_value(), changed = false;
  ImGui::PushID(label);
  if (ImGui::Checkbox("##on", &on)) {
    v = on ? std::optional<double>(def) : std::nullopt;
    changed = true;
  }
  ImGui::SameLine();
  if (on) {
    double x = *v;
    if (ImGui::InputDouble(label, &x, 0, 0, "%.6g")) {
      v = x;
      changed = true;
    }
  } else {
    ImGui::TextDisabled("%s (default)", label);
  }
  ImGui::PopID();
  return changed;
}

// Shortest text that reads back as the same double.
std::string shortest(double v) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

std::string scales_text(const std::vector<double>& v) {
  if (v.empty()) return "amax";
  std::string t;
  for (double x : v) {  // appended in two steps: "x" + string trips GCC 12's -Wrestrict
    if (!t.empty()) t += ' ';
    t += shortest(x);
  }
  return t;
}

// "amax" (or nothing) -> {}; "0.5 0.25" or "0.5, 0.25" -> the numbers; else the error for `path`.
std::string parse_scales(const std::string& text, const std::string& path, std::vector<double>* out) {
  out->clear();
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == ',' || text[pos] == '\t')) ++pos;
    size_t end = pos;
    while (end < text.size() && text[end] != ' ' && text[end] != ',' && text[end] != '\t') ++end;
    if (end == pos) break;
    const std::string tok = text.substr(pos, end - pos);
    if (tok == "amax" && out->empty() && text.find_first_not_of(" ,\t", end) == std::string::npos) return "";
    double v = 0;
    const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (r.ec != std::errc() || r.ptr != tok.data() + tok.size())
      return path + ": \"" + tok + "\" is not a number, write amax, a number or one number per KV head";
    out->push_back(v);
    pos = end;
  }
  return "";
}

}  // namespace

Fp8EditorState fp8_editor_state(const CaseSpec& c) {
  Fp8EditorState st;
  const auto& k = c.kv_cache;
  st.kv_dtype = !k.fp8 ? 0 : *k.fp8 == Fp8Format::kE4M3 ? 1 : 2;
  st.granularity = k.scales.granularity;
  st.k_scales = scales_text(k.scales.k);
  st.v_scales = scales_text(k.scales.v);
  st.fp8_attention = c.fp8_attention.has_value();
  st.q_scale = c.fp8_attention && c.fp8_attention->q_scale ? shortest(*c.fp8_attention->q_scale) : "amax";
  return st;
}

std::string apply_fp8_editor_state(const Fp8EditorState& st, CaseSpec& c) {
  if (st.kv_dtype == 0) {  // the scales and FP8 attention exist only with an FP8 cache
    c.kv_cache.fp8.reset();
    c.kv_cache.scales = KvScalesSpec{};
    c.fp8_attention.reset();
    return "";
  }
  KvScalesSpec sc;
  sc.granularity = st.granularity;
  std::string e = parse_scales(st.k_scales, "/kv_cache/scales/k", &sc.k);
  if (e.empty()) e = parse_scales(st.v_scales, "/kv_cache/scales/v", &sc.v);
  std::vector<double> q;
  if (e.empty() && st.fp8_attention) e = parse_scales(st.q_scale, "/fp8_attention/q_scale", &q);
  if (e.empty() && q.size() > 1) e = "/fp8_attention/q_scale: " + std::to_string(q.size()) + " numbers, give one (or amax)";
  if (!e.empty()) return e;
  c.kv_cache.fp8 = st.kv_dtype == 1 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  c.kv_cache.scales = sc;
  if (st.fp8_attention) {
    Fp8AttentionSpec fa;
    if (!q.empty()) fa.q_scale = q[0];
    c.fp8_attention = fa;
  } else {
    c.fp8_attention.reset();
  }
  return "";
}

// The FP8 fields: the cache's dtype, the scales' granularity and values, FP8 attention.
// /mla (docs/conventions.md section 13): on/off, the form and the dims; the KV heads and head dims follow.
bool EditorPanel::draw_mla(CaseSpec& c) {
  bool on = c.is_mla(), ch = false;
  if (ImGui::Checkbox("MLA (DeepSeek)", &on)) {
    ch = true;
    if (on) {
      c.mla = MlaSpec{};
    } else {
      c.mla.reset();
      c.num_kv_heads = 1;
    }
  }
  if (!c.mla) return ch;
  MlaSpec& m = *c.mla;
  ch |= ImGui::Checkbox("absorbed (decode form)", &m.absorbed);
  ch |= ImGui::InputInt("kv_lora_rank", &m.kv_lora_rank, 64);
  ch |= ImGui::InputInt("rope_dim", &m.rope_dim, 16);
  ch |= ImGui::InputInt("qk_nope_dim", &m.qk_nope_dim, 16);
  ch |= ImGui::InputInt("v_head_dim", &m.v_head_dim, 16);
  if (ch || c.num_kv_heads != (m.absorbed ? 1 : c.num_qo_heads) || c.head_dim_qk != m.qk_dim() || c.head_dim_vo != m.vo_dim()) {
    c.num_kv_heads = m.absorbed ? 1 : c.num_qo_heads;
    c.head_dim_qk = m.qk_dim();
    c.head_dim_vo = m.vo_dim();
    ch = true;
  }
  ImGui::TextDisabled("  %s: heads %d/%d, head dims %d/%d, sm_scale 1/sqrt(%d)", m.absorbed ? "absorbed" : "non-absorbed",
                      c.num_qo_heads, c.num_kv_heads, c.head_dim_qk, c.head_dim_vo, m.qk_nope_dim + m.rope_dim);
  return ch;
}

bool EditorPanel::draw_fp8(CaseSpec& c) {
  Fp8EditorState st = fp8_editor_state(c);
  bool ch = false;
  const std::string same = std::string("same as /dtype (") + dtype_name(c.dtype) + ")";
  const char* dtypes[] = {same.c_str(), "fp8_e4m3", "fp8_e5m2"};
  ch |= ImGui::Combo("KV dtype", &st.kv_dtype, dtypes, 3);
  if (st.kv_dtype != 0) {
    if (combo("granularity", st.granularity,
              {{"tensor", ScaleGranularity::kTensor},
               {"head (per KV head)", ScaleGranularity::kHead},
               {"token (per token, KV head)", ScaleGranularity::kToken}})) {
      ch = true;
      if (st.granularity == ScaleGranularity::kToken) st.k_scales = st.v_scales = "amax";  // the only choice there
    }
    const ImGuiInputTextFlags enter = ImGuiInputTextFlags_EnterReturnsTrue;
    ch |= ImGui::InputTextWithHint("K scales", "amax, 0.02, or one per KV head", &st.k_scales, enter);
    ch |= ImGui::InputTextWithHint("V scales", "amax, 0.02, or one per KV head", &st.v_scales, enter);
    ImGui::PushTextWrapPos(0.f);
    ImGui::TextDisabled("amax: the group's largest |value| / the format's max; Enter applies");
    ImGui::PopTextWrapPos();
    ch |= ImGui::Checkbox("FP8 attention (Q quantised too)", &st.fp8_attention);
    if (st.fp8_attention) ch |= ImGui::InputTextWithHint("Q scale", "amax or a number", &st.q_scale, enter);
  }
  if (!ch) {
    if (!fp8_error_.empty()) ImGui::TextColored(ImVec4(1, 0.5f, 0.4f, 1), "%s", fp8_error_.c_str());
    return false;
  }
  fp8_error_ = apply_fp8_editor_state(st, c);
  return fp8_error_.empty();
}

// The Requests section: the table (filter, sort, edit, add, remove), the selected request's advanced
// fields and the generator.
bool EditorPanel::draw_requests(CaseSpec& c) {
  bool ch = false;
  ImGui::Text("%zu requests, %lld query / %lld kv tokens", c.requests.size(), static_cast<long long>(c.total_q()),
              static_cast<long long>(c.total_kv()));
  // filter and sort (click a header): a case can hold hundreds of requests
  ImGui::SetNextItemWidth(-110);
  ImGui::InputTextWithHint("filter", "q=1 kv>=4096", &filter_);
  std::string filter_error;
  const std::vector<int> rows = request_rows(c, sort_col_, sort_ascending_, filter_, &filter_error);
  if (!filter_error.empty())
    ImGui::TextColored(ImVec4(1, 0.5f, 0.4f, 1), "%s", filter_error.c_str());
  else if (!filter_.empty())
    ImGui::TextDisabled("%zu of %zu requests", rows.size(), c.requests.size());
  if (ImGui::BeginTable(
          "reqs", 4, ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_Sortable,
          ImVec2(0, 170))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("#", ImGuiTableColumnFlags_WidthFixed | ImGuiTableColumnFlags_DefaultSort, 30);
    ImGui::TableSetupColumn("q_len");
    ImGui::TableSetupColumn("kv_len");
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed | ImGuiTableColumnFlags_NoSort, 44);
    ImGui::TableHeadersRow();
    if (ImGuiTableSortSpecs* sort = ImGui::TableGetSortSpecs(); sort && sort->SpecsCount > 0) {
      sort_col_ = sort->Specs[0].ColumnIndex;
      sort_ascending_ = sort->Specs[0].SortDirection != ImGuiSortDirection_Descending;
    }
    int remove = -1, dup = -1;
    ImGuiListClipper clip;  // only the visible rows are laid out
    clip.Begin(static_cast<int>(rows.size()));
    while (clip.Step())
      for (int k = clip.DisplayStart; k < clip.DisplayEnd; ++k) {
        const size_t i = static_cast<size_t>(rows[k]);
        ImGui::PushID(static_cast<int>(i));
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%zu", i);
        ImGui::TableNextColumn();
        ImGui::SetNextItemWidth(-1);
        ch |= ImGui::InputInt("##q", &c.requests[i].q_len, 0);
        ImGui::TableNextColumn();
        ImGui::SetNextItemWidth(-1);
        ch |= ImGui::InputInt("##kv", &c.requests[i].kv_len, 0);
        ImGui::TableNextColumn();
        if (ImGui::SmallButton("+")) dup = static_cast<int>(i);
        ImGui::SameLine();
        if (ImGui::SmallButton("x")) remove = static_cast<int>(i);
        ImGui::PopID();
      }
    clip.End();
    ImGui::EndTable();
    if (dup >= 0) {
      c.requests.insert(c.requests.begin() + dup + 1, c.requests[dup]);
      c.requests[dup + 1].seed.reset();
      ch = true;
    }
    if (remove >= 0 && c.requests.size() > 1) {
      c.requests.erase(c.requests.begin() + remove);
      ch = true;
    }
  }
  if (ImGui::TreeNode("Selected request: prefix, documents, padding, seed")) {
    sel_ = std::clamp(sel_, 0, static_cast<int>(c.requests.size()) - 1);
    ImGui::InputInt("request #", &sel_);
    sel_ = std::clamp(sel_, 0, static_cast<int>(c.requests.size()) - 1);
    RequestSpec& r = c.requests[sel_];
    // an expression may read prefix_len without the built-in prefix-LM
    if (c.attention.prefix_lm || c.attention.mask_mod || c.attention.score_mod)
      ch |= opt_int("prefix_len", r.prefix_len, std::min(16, r.kv_len), 0, r.kv_len);
    else
      ImGui::TextDisabled("prefix_len: enable prefix-LM (or write a mask_mod) under Attention");
    ch |= opt_int("pad_start", r.pad_start, r.kv_len, 0, r.kv_len);
    std::string docs;
    for (int d : r.doc_starts) {  // appended in two steps: "x" + to_string() trips GCC 12's -Wrestrict
      if (!docs.empty()) docs += ' ';
      docs += std::to_string(d);
    }
    if (ImGui::InputTextWithHint("doc_starts", "0 100 180", &docs, ImGuiInputTextFlags_EnterReturnsTrue)) {
      r.doc_starts = parse_int_list(docs);
      ch = true;
    }
    bool has_seed = r.seed.has_value();
    if (ImGui::Checkbox("own data seed", &has_seed)) {
      r.seed = has_seed ? std::optional<uint64_t>(c.request_seed(sel_)) : std::nullopt;
      ch = true;
    }
    ImGui::TreePop();
  }
  if (ImGui::Button("Add request")) {
    c.requests.push_back(c.requests.empty() ? RequestSpec{1, 128} : c.requests.back());
    c.requests.back().seed.reset();
    ch = true;
  }
  if (ImGui::TreeNode("Generate N requests")) {
    ImGui::InputInt("count", &gen_.count);
    ImGui::Combo("kind", &gen_.kind, "mixed (uniform q, kv)\0decode (q = 1)\0prefill (q = kv)\0");
    ImGui::InputInt("q min", &gen_.q_min);
    ImGui::InputInt("q max", &gen_.q_max);
    ImGui::InputInt("kv min", &gen_.kv_min);
    ImGui::InputInt("kv max", &gen_.kv_max);
    int seed = static_cast<int>(gen_.seed);
    if (ImGui::InputInt("seed", &seed)) gen_.seed = static_cast<uint64_t>(std::max(0, seed));
    if (ImGui::Button("Replace requests")) {
      gen_.count = std::clamp(gen_.count, 1, 4096);
      c.requests = generate_requests(gen_);
      ch = true;
    }
    ImGui::TreePop();
  }
  return ch;
}

// Heads and dims, MLA, the KV cache, FP8, attention, split and data sections.
bool EditorPanel::draw_settings(CaseSpec& c) {
  bool ch = false;
  if (ImGui::CollapsingHeader("Heads, dims, dtype", ImGuiTreeNodeFlags_DefaultOpen)) {
    ch |= ImGui::InputInt("qo heads", &c.num_qo_heads);
    ImGui::BeginDisabled(c.is_mla());  // /mla sets them (draw_mla)
    ch |= ImGui::InputInt("kv heads", &c.num_kv_heads);
    ch |= ImGui::InputInt("head_dim qk", &c.head_dim_qk, 8);
    ch |= ImGui::InputInt("head_dim vo", &c.head_dim_vo, 8);
    ImGui::EndDisabled();
    ch |= combo("dtype", c.dtype, {{"bf16", DType::kBf16}, {"fp16", DType::kFp16}, {"fp32", DType::kFp32}});
  }
  if (ImGui::CollapsingHeader("MLA (latent KV cache)", c.is_mla() ? ImGuiTreeNodeFlags_DefaultOpen : 0)) ch |= draw_mla(c);
  if (ImGui::CollapsingHeader("KV cache")) {
    auto& k = c.kv_cache;
    if (combo("storage", k.storage, {{"paged", KvStorage::kPaged}, {"ragged", KvStorage::kRagged}})) {
      ch = true;
      if (k.storage == KvStorage::kRagged) {
        k.page_size = 1;
        k.layout = KvLayout::kNHD;
        k.allocation = PageAlloc::kContiguous;
        k.null_page = false;
      } else {
        k.page_size = 16;
        k.null_page = true;
      }
    }
    ch |= ImGui::InputInt("page size", &k.page_size);
    ch |= combo("layout", k.layout, {{"NHD", KvLayout::kNHD}, {"HND", KvLayout::kHND}});
    ch |= combo(
        "allocation", k.allocation,
        {{"contiguous", PageAlloc::kContiguous}, {"shuffled", PageAlloc::kShuffled}, {"fragmented", PageAlloc::kFragmented}});
    int as = static_cast<int>(k.allocation_seed);
    if (ImGui::InputInt("allocation seed", &as)) {
      k.allocation_seed = static_cast<uint64_t>(std::max(0, as));
      ch = true;
    }
    ch |= ImGui::Checkbox("null page 0", &k.null_page);
    ch |= ImGui::Checkbox("poison unused (NaN)", &k.poison_unused);
    // FlashAttention-2 sizes its split heuristic by the block table's width, not the longest request
    ch |= opt_int("block table width (pages)", k.max_num_blocks_per_seq, 256, 1, 1 << 22);
  }
  if (ImGui::CollapsingHeader("FP8 (KV cache dtype, scales)", c.fp8_kv() ? ImGuiTreeNodeFlags_DefaultOpen : 0)) ch |= draw_fp8(c);
  if (ImGui::CollapsingHeader("Attention", ImGuiTreeNodeFlags_DefaultOpen)) {
    auto& a = c.attention;
    ch |= ImGui::Checkbox("causal", &a.causal);
    ch |= opt_int("window W", a.window, 256, 1, 1 << 22);
    if (a.window) ImGui::TextDisabled("  FlashInfer window_left %d, FA window_size (%d, 0)", *a.window - 1, *a.window - 1);
    ch |= opt_int("local chunk", a.local_chunk, 256, 1, 1 << 22);
    if (ImGui::Checkbox("prefix-LM", &a.prefix_lm)) {
      ch = true;
      for (auto& r : c.requests) r.prefix_len = a.prefix_lm ? std::optional<int>(std::min(r.kv_len, 16)) : std::nullopt;
    }
    ch |= opt_double("soft-cap", a.soft_cap, 50.0);
    ch |= opt_double("sm_scale", a.sm_scale, c.sm_scale_or_default());
    ch |= ImGui::Checkbox("ALiBi", &a.alibi);
    ch |= expr_.draw(c, sel_);
  }
  if (ImGui::CollapsingHeader("Split", ImGuiTreeNodeFlags_DefaultOpen)) {
    auto& s = c.split;
    if (combo("planner", s.planner,
              {{"flashinfer", Planner::kFlashInfer},
               {"flash_attn", Planner::kFlashAttn},
               {"fixed", Planner::kFixed},
               {"off", Planner::kOff}})) {
      ch = true;
      if (s.planner == Planner::kFixed && !s.fixed_split_size) s.fixed_split_size = 32;
      if (s.planner != Planner::kFixed) s.fixed_split_size.reset();
      if (s.planner == Planner::kFlashAttn || s.planner == Planner::kOff) s.cuda_graph = false;
    }
    if (s.planner == Planner::kFixed) ch |= opt_int("fixed split (pages)", s.fixed_split_size, 32, 1, 1 << 22);
    ch |= opt_int("fixed tile q", s.fixed_tile_q, 64, 16, 128);
    ch |= ImGui::InputInt("num SMs", &s.num_sms);
    ch |= ImGui::Checkbox("CUDA graph", &s.cuda_graph);
    ch |= combo("partials", s.partials, {{"fp32", PartialPrecision::kFp32}, {"dtype", PartialPrecision::kDtype}});
  }
  if (ImGui::CollapsingHeader("Data")) {
    int seed = static_cast<int>(c.data.seed);
    if (ImGui::InputInt("seed", &seed)) {
      c.data.seed = static_cast<uint64_t>(std::max(0, seed));
      ch = true;
    }
    ch |= ImGui::InputDouble("mean", &c.data.mean, 0, 0, "%.4g");
    ch |= ImGui::InputDouble("std", &c.data.std, 0, 0, "%.4g");
    std::string chans;
    for (int x : c.data.outlier_channels) {
      if (!chans.empty()) chans += ' ';
      chans += std::to_string(x);
    }
    if (ImGui::InputTextWithHint("outlier K channels", "e.g. 3 17", &chans, ImGuiInputTextFlags_EnterReturnsTrue)) {
      c.data.outlier_channels = parse_int_list(chans);
      ch = true;
    }
    if (!c.data.outlier_channels.empty()) ch |= ImGui::InputDouble("outlier scale", &c.data.outlier_scale, 0, 0, "%.4g");
    ch |= opt_int("reference sample rows", c.sample_rows, 16, 1, 1 << 22);
  }
  return ch;
}

bool EditorPanel::draw(CaseSpec& c, const std::vector<std::string>& examples, std::string* preset) {
  bool ch = false;
  ImGui::PushItemWidth(-110);
  if (ImGui::BeginCombo("preset", "examples/...")) {
    for (const auto& e : examples)
      if (ImGui::Selectable(std::filesystem::path(e).filename().string().c_str())) *preset = e;
    ImGui::EndCombo();
  }
  ch |= ImGui::InputText("name", &c.name);
  ch |= ImGui::InputTextMultiline("description", &c.description, ImVec2(-110, 44));
  // the field does not wrap: the whole description, wrapped, on hover
  if (!c.description.empty() && ImGui::IsItemHovered() && !ImGui::IsItemActive()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
    ImGui::TextUnformatted(c.description.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
  if (ImGui::CollapsingHeader("Requests", ImGuiTreeNodeFlags_DefaultOpen)) ch |= draw_requests(c);
  ch |= draw_settings(c);
  if (ImGui::CollapsingHeader("Backends", ImGuiTreeNodeFlags_DefaultOpen)) {
    for (const auto& id : known_backends()) {
      bool on = std::find(c.backends.begin(), c.backends.end(), id) != c.backends.end();
      if (ImGui::Checkbox(id.c_str(), &on)) {
        ch = true;
        if (on) {
          c.backends.push_back(id);
        } else {
          c.backends.erase(std::remove(c.backends.begin(), c.backends.end(), id), c.backends.end());
          // comparisons that name a removed backend go too (else the case is invalid)
          c.comparisons.erase(std::remove_if(c.comparisons.begin(), c.comparisons.end(),
                                             [&](const ComparisonSpec& k) {
                                               return k.backend == id || k.baseline == id ||
                                                      (k.rule == CompareRule::kTwiceLowp && k.lowp == id);
                                             }),
                              c.comparisons.end());
        }
      }
    }
  }
  if (ImGui::CollapsingHeader("Comparisons")) {
    int remove = -1;
    for (size_t i = 0; i < c.comparisons.size(); ++i) {
      auto& k = c.comparisons[i];
      ImGui::PushID(static_cast<int>(i));
      ImGui::Text("%s vs %s", k.backend.c_str(), k.baseline.c_str());
      ImGui::SameLine();
      if (ImGui::SmallButton("x")) remove = static_cast<int>(i);
      ch |= combo("rule", k.rule,
                  {{"allclose", CompareRule::kAllclose},
                   {"twice_lowp", CompareRule::kTwiceLowp},
                   {"bitwise", CompareRule::kBitwise},
                   {"max_abs", CompareRule::kMaxAbs}});
      ch |= ImGui::InputDouble("rtol", &k.rtol, 0, 0, "%.3g");
      ch |= ImGui::InputDouble("atol", &k.atol, 0, 0, "%.3g");
      if (k.rule == CompareRule::kTwiceLowp && ImGui::BeginCombo("lowp baseline", k.lowp.c_str())) {
        for (const auto& id : c.backends)
          if (ImGui::Selectable(id.c_str(), id == k.lowp)) {
            k.lowp = id;
            ch = true;
          }
        ImGui::EndCombo();
      }
      ImGui::PopID();
    }
    if (remove >= 0) {
      c.comparisons.erase(c.comparisons.begin() + remove);
      ch = true;
    }
    if (c.backends.size() >= 2 && ImGui::BeginCombo("add comparison", "backend vs baseline ...")) {
      for (const auto& a : c.backends)
        for (const auto& b : c.backends)
          if (a != b && ImGui::Selectable((a + " vs " + b).c_str())) {
            ComparisonSpec k;
            k.backend = a;
            k.baseline = b;
            k.lowp = backend_for_role(Role::kLowp);
            c.comparisons.push_back(k);
            ch = true;
          }
      ImGui::EndCombo();
    }
  }
  if (ImGui::CollapsingHeader("Kernels"))
    ch |= opt_int("pad head_dim to (the padded flash backend)", c.pad_head_dim_to, 64, 1, 1024);
  ImGui::PopItemWidth();
  return ch;
}

}  // namespace attnscope::gui
