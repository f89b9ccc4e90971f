// Building, planning and caching the cuDNN SDPA graph of a shape class, through the cuDNN
// frontend's graph API (header-only, from the pinned nvidia-cudnn-frontend wheel).
#include "cudnn_graph.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <list>
#include <unordered_map>
#include <vector>

namespace attnscope::peers::cudnn {

namespace fe = cudnn_frontend;

namespace {

// Tensor uids: the keys of the variant pack at execution.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kLse,
  kSeqQ,
  kSeqKv,
  kQOffsets,
  kOOffsets,
  kLseOffsets,
  kKOffsets,
  kVOffsets,
  kPageTableK,
  kPageTableV,
  kDescaleQ,  // FP8 attention: per-tensor factors, float [1, 1, 1, 1] each
  kDescaleK,
  kDescaleV,
  kDescaleS,
  kScaleS,
  kScaleO,
  kAmaxS,
  kAmaxO,
  kSink,  // attention sinks: float [1, Hq, 1, 1]
};

fe::DataType_t fp8_type(Fp8Format f) { return f == Fp8Format::kE4M3 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::FP8_E5M2; }

constexpr size_t kCacheCapacity = 16;  // graphs kept; each holds its compiled plan

using Ms = std::chrono::duration<double, std::milli>;

const char* code_name(fe::error_code_t c) {
  switch (c) {
    case fe::error_code_t::OK:
      return "OK";
    case fe::error_code_t::ATTRIBUTE_NOT_SET:
      return "ATTRIBUTE_NOT_SET";
    case fe::error_code_t::SHAPE_DEDUCTION_FAILED:
      return "SHAPE_DEDUCTION_FAILED";
    case fe::error_code_t::INVALID_TENSOR_NAME:
      return "INVALID_TENSOR_NAME";
    case fe::error_code_t::INVALID_VARIANT_PACK:
      return "INVALID_VARIANT_PACK";
    case fe::error_code_t::GRAPH_NOT_SUPPORTED:
      return "GRAPH_NOT_SUPPORTED";
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
      return "GRAPH_EXECUTION_PLAN_CREATION_FAILED";
    case fe::error_code_t::GRAPH_EXECUTION_FAILED:
      return "GRAPH_EXECUTION_FAILED";
    case fe::error_code_t::HEURISTIC_QUERY_FAILED:
      return "HEURISTIC_QUERY_FAILED";
    case fe::error_code_t::UNSUPPORTED_GRAPH_FORMAT:
      return "UNSUPPORTED_GRAPH_FORMAT";
    case fe::error_code_t::CUDA_API_FAILED:
      return "CUDA_API_FAILED";
    case fe::error_code_t::CUDNN_BACKEND_API_FAILED:
      return "CUDNN_BACKEND_API_FAILED";
    case fe::error_code_t::INVALID_CUDA_DEVICE:
      return "INVALID_CUDA_DEVICE";
    case fe::error_code_t::HANDLE_ERROR:
      return "HANDLE_ERROR";
    case fe::error_code_t::INVALID_VALUE:
      return "INVALID_VALUE";
    case fe::error_code_t::NVRTC_COMPILATION_FAILED:
      return "NVRTC_COMPILATION_FAILED";
  }
  return "UNKNOWN_ERROR";
}

// Every frontend call returns an error object with a message; it becomes an exception naming the
// operation. GRAPH_NOT_SUPPORTED (the support surface, check_support) and HEURISTIC_QUERY_FAILED
// (no engine for the graph) are cuDNN refusing the configuration, not failures.
void check(fe::error_t e, const char* op) {
  if (e.is_good()) return;
  const fe::error_code_t code = e.get_code();
  throw CudnnError(std::string("cudnn_frontend ") + op + ": " + code_name(code) + ": " + e.get_message(),
                   code == fe::error_code_t::GRAPH_NOT_SUPPORTED || code == fe::error_code_t::HEURISTIC_QUERY_FAILED);
}

// libcudnn.so.9 (held by the binaries' RPATH) opens its engine libraries through its own search,
// where LD_LIBRARY_PATH comes first: opened here by path from its folder, they are the ones it then
// finds (issue 47). `all`: the engines too (before a handle); else the graph library cudnnGetVersion
// answers from.
void pin_cudnn_libraries(bool all) {
  static std::atomic<bool> graph_done = false, all_done = false;  // dlopen again is harmless: a count
  if (all ? all_done : graph_done) return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) == 0 || info.dli_fname == nullptr) return;
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  const std::string so = ".so." + std::to_string(CUDNN_MAJOR);
  std::vector<std::string> names = {"libcudnn_graph"};
  if (all)
    names.insert(names.end(), {"libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_heuristic",
                               "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv"});
  for (const auto& n : names) dlopen((dir + n + so).c_str(), RTLD_LAZY | RTLD_GLOBAL);  // a missing one: cuDNN's own search
  graph_done = true;
  if (all) all_done = true;
}

// One handle for the process, created on first use and never destroyed: the cached plans refer to
// it, and destroying it during static destruction can outlive the CUDA context.
cudnnHandle_t shared_handle() {
  static cudnnHandle_t h = nullptr;
  if (!h) {
    pin_cudnn_libraries(true);
    const cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
      h = nullptr;
      throw CudnnError(std::string("cudnnCreate: ") + cudnnGetErrorString(st), false);
    }
  }
  return h;
}

std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& g, const char* name, Uid uid, int64_t n) {
  // cuDNN's sequence lengths and ragged offsets are int32 tensors of shape (n, 1, 1, 1).
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

// The frontend graph of a shape class (not yet validated or built). `device` and `sm_version`
// describe a target device for a deviceless (ahead-of-time) build; by default the graph targets
// the current device through the handle. They must be set before the nodes are made, which copy
// the graph's context.
std::shared_ptr<fe::graph::Graph> make_frontend_graph(const GraphKey& k, fe::AttentionImplementation_t impl,
                                                      std::shared_ptr<const fe::DeviceProperties> device = nullptr,
                                                      int sm_version = 0) {
  namespace fg = fe::graph;
  auto g = std::make_shared<fg::Graph>();
  if (device) g->set_device_properties(device);
  if (sm_version > 0) g->set_sm_version(sm_version);
  const fe::DataType_t case_type = k.dtype == DType::kFp16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
  g->set_name("attnscope_cudnn_sdpa")
      .set_io_data_type(k.fp8 ? fp8_type(*k.fp8) : case_type)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t B = k.batch, Hq = k.hq, Hk = k.hk, Dqk = k.d_qk, Dv = k.d_v, Sq = k.s_q, Skv = k.s_kv;

  // Q as attnscope stores it, [total_q, Hq, d_qk] token-packed: cuDNN's (B, Hq, S_q, d_qk) with the
  // token stride Hq * d_qk ("BSHD"), each sequence starting at its ragged offset. A packed GQA
  // decode batch (k.group > 1, one token per sequence) reads the same memory as (B, Hk, group,
  // d_qk): query head hk * group + r is row r of head hk, at hk * group * d_qk + r * d_qk. O and the
  // stats below are viewed the same way.
  const bool packed = k.group > 1;
  const int64_t Hrows = packed ? Hk : Hq;  // cuDNN's query heads
  auto bshd = [&](int64_t d) -> std::vector<int64_t> {
    if (packed) return {Hq * d, k.group * d, d, 1};
    return {Sq * Hq * d, d, Hq * d, 1};
  };
  auto q = g->tensor(fg::Tensor_attributes().set_name("Q").set_uid(kQ).set_dim({B, Hrows, Sq, Dqk}).set_stride(bshd(Dqk)));
  // Ragged offsets only in the ragged form; the dense form's strides are the whole addressing.
  const bool ragged = !k.dense;
  if (ragged) q->set_ragged_offset(index_tensor(*g, "q_offsets", kQOffsets, B + 1));

  std::shared_ptr<fg::Tensor_attributes> kt, vt, table_k, table_v;
  if (k.paged) {
    // The pool itself as cuDNN's container (blocks, Hk, block_size, d), read in place: the NHD
    // pool [pages, page, Hk, d] has slot stride Hk * d and head stride d; HND [pages, Hk, page, d]
    // is the container's natural order.
    const int64_t P = k.num_pages, ps = k.page_size;
    auto strides = [&](int64_t d) -> std::vector<int64_t> {
      if (k.layout == KvLayout::kNHD) return {ps * Hk * d, d, Hk * d, 1};
      return {Hk * ps * d, ps * d, d, 1};
    };
    kt = g->tensor(fg::Tensor_attributes().set_name("K_pool").set_uid(kK).set_dim({P, Hk, ps, Dqk}).set_stride(strides(Dqk)));
    vt = g->tensor(fg::Tensor_attributes().set_name("V_pool").set_uid(kV).set_dim({P, Hk, ps, Dv}).set_stride(strides(Dv)));
    auto table = [&](const char* name, Uid uid) {
      return g->tensor(fg::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({B, 1, k.table_size, 1})
                           .set_stride({k.table_size, k.table_size, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
    };
    table_k = table("page_table_k", kPageTableK);
    table_v = table("page_table_v", kPageTableV);
  } else {
    // Ragged storage, [tokens, Hk, d] contiguous per request: cuDNN's (B, Hk, S_kv, d) with ragged
    // offsets, like Q.
    kt = g->tensor(fg::Tensor_attributes()
                       .set_name("K")
                       .set_uid(kK)
                       .set_dim({B, Hk, Skv, Dqk})
                       .set_stride({Skv * Hk * Dqk, Dqk, Hk * Dqk, 1}));
    if (ragged) kt->set_ragged_offset(index_tensor(*g, "k_offsets", kKOffsets, B + 1));
    vt = g->tensor(
        fg::Tensor_attributes().set_name("V").set_uid(kV).set_dim({B, Hk, Skv, Dv}).set_stride({Skv * Hk * Dv, Dv, Hk * Dv, 1}));
    if (ragged) vt->set_ragged_offset(index_tensor(*g, "v_offsets", kVOffsets, B + 1));
  }

  // The masks (translation and proofs in cudnn_conventions.cpp): the padding mask is what makes
  // the lengths per sequence; the causal mask is the band's right bound 0 with the diagonal
  // aligned bottom-right per sequence (top-left only for ALiBi, where the two coincide); the
  // window is the band's left bound, W itself.
  const auto alignment = k.top_left ? fe::DiagonalAlignment_t::TOP_LEFT : fe::DiagonalAlignment_t::BOTTOM_RIGHT;
  auto attrs = fg::SDPA_attributes().set_name("sdpa").set_implementation(impl).set_generate_stats(true).set_attn_scale(k.scale);
  if (ragged)
    attrs.set_padding_mask(true)
        .set_seq_len_q(index_tensor(*g, "seq_len_q", kSeqQ, B))
        .set_seq_len_kv(index_tensor(*g, "seq_len_kv", kSeqKv, B));
  if (k.causal) attrs.set_diagonal_alignment(alignment).set_diagonal_band_right_bound(0);
  if (k.window > 0) attrs.set_diagonal_alignment(alignment).set_diagonal_band_left_bound(k.window);
  if (k.alibi) attrs.set_alibi_mask(true);
  // The sink joins the softmax after the scale and the masks (the frontend's composite softmax:
  // max(row max, sink), then exp(sink - max) added to the sum), so it is in the scaled logits' units
  // and Stats includes it, as attnscope's LSE does. Never packed (translate()): one value per head.
  if (k.sinks)
    attrs.set_sink_token(g->tensor(fg::Tensor_attributes()
                                       .set_name("sink_token")
                                       .set_uid(kSink)
                                       .set_dim({1, Hq, 1, 1})
                                       .set_stride({Hq, 1, 1, 1})
                                       .set_data_type(fe::DataType_t::FLOAT)));
  if (k.paged)
    attrs.set_paged_attention_k_table(table_k).set_paged_attention_v_table(table_v).set_paged_attention_max_seq_len_kv(
        static_cast<int>(Skv));

  std::shared_ptr<fg::Tensor_attributes> o, stats;
  if (k.fp8) {
    // The descale factors multiply Q.K^T (descale_q * descale_k) and P.V (descale_s * descale_v);
    // P is quantised as P * scale_s and O as O * scale_o (the frontend's FP8 sample's graph).
    auto factor = [&](const char* name, Uid uid) {
      return g->tensor(fg::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({1, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::FLOAT));
    };
    attrs._set_mma_core_mode(fp8_type(*k.fp8));  // the frontend's own setter; sdpa_fp8 would default to E4M3
    auto out =
        g->sdpa_fp8(q, kt, vt, factor("descale_q", kDescaleQ), factor("descale_k", kDescaleK), factor("descale_v", kDescaleV),
                    factor("descale_s", kDescaleS), factor("scale_s", kScaleS), factor("scale_o", kScaleO), attrs);
    o = out[0];
    stats = out[1];
    for (auto [t, uid] : {std::pair{out[2], kAmaxS}, std::pair{out[3], kAmaxO}})
      t->set_output(true).set_uid(uid).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
    o->set_data_type(k.o_fp8 ? fp8_type(*k.fp8) : case_type);
  } else {
    auto out = g->sdpa(q, kt, vt, attrs);
    o = out[0];
    stats = out[1];
  }
  // O and the softmax stats land in attnscope's [total_q, Hq, d_v] and [total_q, Hq] directly.
  // Stats is cuDNN's natural-log LSE of the scaled (and ALiBi-biased) scores, max + ln(sum exp):
  // the frontend's set_stats_use_log2 would convert it to base 2 and is left off, so what cuDNN
  // writes is attnscope's LSE convention as is.
  o->set_output(true).set_uid(kO).set_dim({B, Hrows, Sq, Dv}).set_stride(bshd(Dv));
  if (ragged) o->set_ragged_offset(index_tensor(*g, "o_offsets", kOOffsets, B + 1));
  stats->set_output(true)
      .set_uid(kLse)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({B, Hrows, Sq, 1})
      .set_stride(packed ? std::vector<int64_t>{Hq, k.group, 1, 1} : std::vector<int64_t>{Sq * Hq, 1, Hq, 1});
  if (ragged) stats->set_ragged_offset(index_tensor(*g, "lse_offsets", kLseOffsets, B + 1));
  return g;
}

class BuiltGraph final : public SdpaGraph {
 public:
  BuiltGraph(std::shared_ptr<fe::graph::Graph> g, const GraphKey& key) : g_(std::move(g)), key_(key) {}

  void execute(const Bindings& b) const override {
    // The variant pack names exactly the graph's tensors: the dense form has no index tensors.
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<void*>(b.q)}, {kK, const_cast<void*>(b.k)}, {kV, const_cast<void*>(b.v)}, {kO, b.o}, {kLse, b.lse},
    };
    if (!key_.dense) {
      pack[kSeqQ] = const_cast<int32_t*>(b.seq_q);
      pack[kSeqKv] = const_cast<int32_t*>(b.seq_kv);
      pack[kQOffsets] = const_cast<int32_t*>(b.q_offsets);
      pack[kOOffsets] = const_cast<int32_t*>(b.o_offsets);
      pack[kLseOffsets] = const_cast<int32_t*>(b.stats_offsets);
    }
    if (key_.fp8) {
      for (auto [uid, ptr] :
           {std::pair{kDescaleQ, b.descale_q}, std::pair{kDescaleK, b.descale_k}, std::pair{kDescaleV, b.descale_v},
            std::pair{kDescaleS, b.descale_s}, std::pair{kScaleS, b.scale_s}, std::pair{kScaleO, b.scale_o}})
        pack[uid] = const_cast<float*>(ptr);
      pack[kAmaxS] = b.amax_s;
      pack[kAmaxO] = b.amax_o;
    }
    if (key_.sinks) pack[kSink] = const_cast<float*>(b.sinks);
    if (key_.paged) {
      pack[kPageTableK] = const_cast<int32_t*>(b.page_table);
      pack[kPageTableV] = const_cast<int32_t*>(b.page_table);
    } else if (!key_.dense) {
      pack[kKOffsets] = const_cast<int32_t*>(b.k_offsets);
      pack[kVOffsets] = const_cast<int32_t*>(b.v_offsets);
    }
    check(g_->execute(shared_handle(), pack, b.workspace), "execute");
  }

 private:
  std::shared_ptr<fe::graph::Graph> g_;
  GraphKey key_;
};

// Validation, lowering to the backend, heuristics, support check and plan compilation. The
// composite node (the SDPA pattern cuDNN has fused since 8.9, the one behind paged and ragged
// attention in its samples) is tried first; the unified node (one backend SDPA operation, cuDNN
// 9.13.1+) second, for graphs the composite cannot run.
std::shared_ptr<BuiltGraph> build(const GraphKey& key) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string failures;
  bool all_refusals = true;
  const std::pair<fe::AttentionImplementation_t, const char*> impls[] = {{fe::AttentionImplementation_t::COMPOSITE, "composite"},
                                                                         {fe::AttentionImplementation_t::UNIFIED, "unified"}};
  for (const auto& [impl, name] : impls) {
    try {
      cudnnHandle_t h = shared_handle();
      std::shared_ptr<fe::graph::Graph> g = make_frontend_graph(key, impl);
      check(g->validate(), "validate");
      check(g->build_operation_graph(h), "build_operation_graph");
      check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
      check(g->check_support(h), "check_support");
      check(g->build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
      int64_t ws = 0;
      check(g->get_workspace_size(ws), "get_workspace_size");
      auto built = std::make_shared<BuiltGraph>(g, key);
      built->workspace_bytes = ws;
      built->implementation = name;
      std::string plan;
      if (g->get_plan_name(plan).is_good()) built->engine = plan;
      built->build_ms = Ms(std::chrono::steady_clock::now() - t0).count();
      return built;
    } catch (const CudnnError& e) {
      failures += std::string(failures.empty() ? "" : "; ") + name + ": " + e.what();
      all_refusals = all_refusals && e.unsupported;
    } catch (const std::exception& e) {  // the frontend throws on a few paths (e.g. no SDPA implementation)
      failures += std::string(failures.empty() ? "" : "; ") + name + ": " + e.what();
      all_refusals = false;
    }
  }
  throw CudnnError("cuDNN cannot build the SDPA graph for " + key.describe() + " (" + failures + ")", all_refusals);
}

struct CacheEntry {
  GraphKey key;
  std::shared_ptr<const SdpaGraph> graph;
};

// Leaked on purpose, like the handle: the compiled plans must not be freed after CUDA shuts down.
std::list<CacheEntry>& cache() {
  static auto* c = new std::list<CacheEntry>();
  return *c;
}

}  // namespace

std::unique_lock<std::mutex> cudnn_lock() {
  static std::mutex m;
  return std::unique_lock<std::mutex>(m);
}

GraphLookup find_or_build_graph(const GraphKey& key) {
  const auto t0 = std::chrono::steady_clock::now();
  GraphLookup r;
  auto& c = cache();
  for (auto it = c.begin(); it != c.end(); ++it)
    if (it->key == key) {
      c.splice(c.begin(), c, it);  // most recently used first
      r.graph = c.front().graph;
      r.cached = true;
      r.lookup_ms = Ms(std::chrono::steady_clock::now() - t0).count();
      return r;
    }
  // cuDNN's refusals are remembered too: a backend that falls back to another form (cudnn.sdpa_fp8's
  // FP8 output) would otherwise pay the refused build on every run.
  static auto* refused = new std::list<std::pair<GraphKey, CudnnError>>();
  for (const auto& [k, e] : *refused)
    if (k == key) throw e;
  try {
    r.graph = build(key);
  } catch (const CudnnError& e) {
    if (e.unsupported) {
      refused->push_front({key, e});
      if (refused->size() > kCacheCapacity) refused->pop_back();
    }
    throw;
  }
  c.push_front({key, r.graph});
  while (c.size() > kCacheCapacity) c.pop_back();
  r.lookup_ms = Ms(std::chrono::steady_clock::now() - t0).count();
  return r;
}

int cudnn_runtime_version() {
  pin_cudnn_libraries(false);
  return static_cast<int>(cudnnGetVersion());
}

std::string cudnn_library_path() {
  // the file the loader mapped cudnnGetVersion from, resolved through its soname links
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) == 0 || info.dli_fname == nullptr) return "";
  char real[PATH_MAX];
  return realpath(info.dli_fname, real) ? std::string(real) : std::string(info.dli_fname);
}

const CudnnRuntimeVerdict& cudnn_runtime() {
  static const CudnnRuntimeVerdict v = compare_cudnn_versions(CUDNN_VERSION, cudnn_runtime_version(), cudnn_library_path());
  return v;
}

std::string cudnn_version_note() {
  return cudnn_runtime().text + ", cuDNN frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION) +
         " (" ATTNSCOPE_CUDNN_FRONTEND_PIN ")";
}

}  // namespace attnscope::peers::cudnn
