// Device pieces shared by cuda.flash's two kernels: the mma.sync kernel (flash_kernel.cuh, any
// NVIDIA GPU from sm_80) and the Hopper kernel (flash_sm90_kernel.cuh, wgmma). Both execute the same
// plan with the same per-row numerics: the rows' visible key ranges, the physical pages of a tile,
// the logits of a tile (scale, soft-cap, ALiBi, a mask_mod's bits, an interpreted score_mod), the
// online-softmax step in base 2 and the output (final O and LSE, or a split-KV partial). A warp's
// accumulators have mma.sync's m16n8 fragment layout in both (wgmma's m64nN accumulators give each
// warp of a warpgroup the same layout for its 16 rows), so these functions serve both.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attnscope/block_map.h"
#include "attnscope/mask.h"
#include "attnscope/softmax_state.h"
#include "flash_params.h"
#include "sm80_primitives.cuh"

namespace attnscope::cuda {

// What the logit of a tile needs beside S: the kernel variant's per-CTA constants and this thread's
// rows of one 16-row block (rows g and g + 8 of the block). kMode: the kernel variant (flash_mode()).
template <FlashMode kMode>
struct FlashRowBlock {
  static constexpr bool kBits = flash_mode_bits(kMode);
  static constexpr bool kCapAlibi = flash_mode_cap_alibi(kMode);
  // a mask_mod's bit rows (kBits): the rows' indices in the mask (-1: none), not pointers: the two-CTA
  // mask_mod kernels sit at 128 registers and spilled more with two 64-bit pointers held
  int brow[2] = {-1, -1};
  float aslope[2] = {0.f, 0.f}, aq[2] = {0.f, 0.f};  // ALiBi slope and query position (kCapAlibi)
};

// One CTA's work item (or, in a paired Hopper CTA, one warpgroup's): the unit, its mask and pages,
// and this thread's place in its warp. blk0 is the CTA-wide 16-row block at which the item's rows
// start (0; 4 for a paired CTA's second warpgroup), so the per-block tables in shared memory, indexed
// by CTA-wide block, never collide between the two items.
struct FlashCta {
  const FlashParams& p;
  WorkItem it;
  WorkUnit un;
  RowMask m;
  int item, kvh, G, g, t4, lane, blk0;
  const int* pages;
  int64_t tok0;

  __device__ FlashCta(const FlashParams& params, int tid) : FlashCta(params, tid, params.item_of_cta(params.item_cta()), 0) {}
  __device__ FlashCta(const FlashParams& params, int tid, int item_index, int first_blk)
      : p(params),
        it(params.items[item_index]),
        un(params.units[it.unit]),
        m(params.view.masks[un.request]),
        item(item_index),
        kvh(params.heads_inner ? blockIdx.x : blockIdx.z),
        G(params.group),
        g(tid % 32 / 4),
        t4(tid % 4),
        lane(tid % 32),
        blk0(first_blk),
        pages(params.view.kv_indices + params.view.kv_indptr[un.request]),
        tok0(params.unit_tok[it.unit]) {}

  // packed row of row `i` (0: g, 1: g + 8) of CTA-wide 16-row block `blk`
  __device__ int row_of(int blk, int i) const { return it.row_begin + (blk - blk0) * 16 + g + 8 * i; }

  // The starting softmax state of block `blk`'s rows. A sink starts its row (m = the sink, d = 1: its
  // term, no value vector) in the final output or the row's first KV chunk, so the online softmax carries
  // it and the store pays nothing for it; else m = -inf, d = 0. `owner`: the one thread of the quad (and
  // the one key-split warp) whose partial row sum holds the term (quad_row_sums and the warps' merge add).
  __device__ __forceinline__ void start_rows(int blk, float (&mx)[2], float (&den)[2], bool owner) const {
    const bool sink = p.sink2 && (!p.split || it.kv_chunk == 0);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_of(blk, i);
      const bool mine = sink && row < it.row_end;
      mx[i] = mine ? p.sink2[kvh * G + row % G] : -INFINITY;
      den[i] = mine && owner && t4 == 0 ? 1.f : 0.f;
    }
  }

  // The visible key ranges of block `blk`'s rows into s_rlo / s_rhi (an empty row gets [0, 0)), the
  // block's common range into s_wlo / s_whi (a tile inside it needs no per-key test), and the union
  // of all rows' ranges into s_lo / s_hi (atomics; initialised by the caller).
  __device__ void row_ranges(int blk, int* s_lo, int* s_hi, int* s_rlo, int* s_rhi, int* s_wlo, int* s_whi) const {
    int wlo = INT_MIN, whi = INT_MAX;  // the block's common range (empty when any row sees nothing)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_of(blk, i);
      const bool ok = row < it.row_end;
      int lo = 0, hi = 0;
      visible_range(m, q_abs_of(m, un.q_begin + (ok ? row / G : 0)), &lo, &hi);
      lo = max(lo, it.kv_begin);
      hi = min(hi, it.kv_end);
      if (!ok || hi <= lo) {
        lo = 0;
        hi = 0;
      } else {
        atomicMin(s_lo, lo);
        atomicMax(s_hi, hi);
      }
      wlo = max(wlo, lo);
      whi = min(whi, hi);
      if (t4 == 0) {
        s_rlo[blk * 16 + g + 8 * i] = lo;
        s_rhi[blk * 16 + g + 8 * i] = hi;
      }
    }
    wlo = __reduce_max_sync(0xffffffffu, wlo);
    whi = __reduce_min_sync(0xffffffffu, whi);
    if (lane == 0) {
      s_wlo[blk] = wlo;
      s_whi[blk] = whi;
    }
  }

  // the bit rows and ALiBi terms of block `blk`'s rows (ALiBi: each row's slope and query position
  // once per CTA rather than per element; the division by G and the position lookup, unrolled 32
  // times, were most of the soft-cap loop's code)
  template <FlashMode kMode>
  __device__ FlashRowBlock<kMode> row_block(int blk) const {
    FlashRowBlock<kMode> b;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_of(blk, i);
      if constexpr (FlashRowBlock<kMode>::kBits) b.brow[i] = p.mask_bits && row < it.row_end ? un.q_begin + row / G : -1;
      if constexpr (FlashRowBlock<kMode>::kCapAlibi) {
        if (p.alibi && row < it.row_end) {
          b.aslope[i] = p.slopes[kvh * G + row % G];
          b.aq[i] = static_cast<float>(q_abs_of(m, un.q_begin + row / G));
        }
      }
    }
    return b;
  }

  // The factor softmax_step still applies to this kernel's logits: the plain-logit variants leave q.k
  // unscaled and fold sm_scale x log2(e) into exp2's argument, one FFMA per element where a multiply
  // and a subtract were; the others' logits are base 2 already, and x * 1 and fma(x, 1, -m) = x - m
  // keep their bits.
  template <FlashMode kMode>
  __device__ __forceinline__ float exp_scale() const {
    return flash_mode_plain_logit(kMode) ? p.scale_log2 : 1.f;
  }

  // Logits of a warp's NT x 8 keys from k0 for block `blk`'s rows, in place in s (q.k for the plain
  // kernels, whose scale softmax_step folds in (exp_scale); base 2 after soft-cap, ALiBi or score_mod
  // for the others; -inf where a key is not visible), and the rows' maxima of the quad's part.
  // full: the plan marked the tile full (item_tile_full: every row of the item has every key of it
  // allowed by the mask_mod), so its bits need no test: the same logits as testing them.
  template <FlashMode kMode, int NT>
  __device__ __forceinline__ void logits(float (&s)[NT][4], float (&tile_max)[2], const FlashRowBlock<kMode>& rb, int blk, int k0,
                                         bool full, const int* s_rlo, const int* s_rhi, const int* s_wlo, const int* s_whi,
                                         float inv_cap) const {
    constexpr bool kPlain = flash_mode_plain_logit(kMode), kBits = FlashRowBlock<kMode>::kBits;
    constexpr bool kProg = kMode == FlashMode::kScoreMod;
    constexpr int kKeys = NT * 8;
    tile_max[0] = tile_max[1] = -INFINITY;
    // a mask_mod's bits of this warp's keys: they start at k0 and span at most 64 keys, so two words
    // per row, loaded once per tile instead of once per element
    uint64_t wlo[2] = {~0ull, ~0ull}, whi[2] = {~0ull, ~0ull};
    const int kw = k0 >> 6;
    if constexpr (kBits) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        if (rb.brow[i] >= 0 && !full) {  // a full tile keeps all-ones words: every bit test passes
          const uint64_t* bits = m.bits + static_cast<int64_t>(rb.brow[i]) * m.words;
          wlo[i] = bits[kw];
          whi[i] = kw + 1 < m.words ? bits[kw + 1] : 0ull;
        }
    }
    // every key of this warp's part of the tile is visible to every one of its rows: the plain kernel
    // (and the mask_mod's on a full tile) then takes the maxima without a per-key test (a warp-uniform
    // branch)
    const bool whole = k0 >= s_wlo[blk] && k0 + kKeys <= s_whi[blk];
    if ((kMode == FlashMode::kPlain || kMode == FlashMode::kPlainFp8 || (kMode == FlashMode::kPlainBits && full)) && whole) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j][e]);
      return;
    }
    const int rlo[2] = {s_rlo[blk * 16 + g], s_rlo[blk * 16 + g + 8]};
    const int rhi[2] = {s_rhi[blk * 16 + g], s_rhi[blk * 16 + g + 8]};
    if constexpr (kMode == FlashMode::kPlainBits) {
      // a partial tile of the plain mask_mod kernel: each row's visible keys of this warp's part, and
      // the mask_mod's bits of them, folded into one 64-bit word per row (bit n: key k0 + n) once per
      // tile, so each element tests one bit at a place known at compile time: the same keys seen as by
      // the per-key tests below (a mask_mod with every tile partial needs it). Not for kPlain, whose
      // partial tiles are few (a causal diagonal) and whose registers it would cost.
      static_assert(kKeys <= 64, "a warp's keys fit one word");
      const int sh = k0 & 63;
      uint64_t seen_w[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int lo = max(rlo[i] - k0, 0), hi = min(rhi[i] - k0, kKeys);
        uint64_t w = hi <= lo ? 0ull : (hi >= 64 ? ~0ull : (1ull << hi) - 1ull) & (~0ull << lo);
        w &= sh ? (wlo[i] >> sh) | (whi[i] << (64 - sh)) : wlo[i];
        seen_w[i] = w >> (2 * t4);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2;
          const float x = (seen_w[i] >> (8 * j + e % 2)) & 1ull ? s[j][e] : -INFINITY;
          s[j][e] = x;
          tile_max[i] = fmaxf(tile_max[i], x);
        }
    } else {  // every other kernel variant: a test per key
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2;
          const int key = k0 + 8 * j + 2 * t4 + (e % 2);
          float x = -INFINITY;
          bool seen = key >= rlo[i] && key < rhi[i];
          if constexpr (kBits) {
            const int off = key - (kw << 6);                                     // in [0, 128)
            if (seen) seen = ((off < 64 ? wlo[i] : whi[i]) >> (off & 63)) & 1u;  // the mask_mod's bit
          }
          if (seen) {
            if constexpr (kPlain) {
              x = s[j][e];
            } else if constexpr (kProg) {
              const int row = row_of(blk, i);
              ExprEnv env = p.score_envs[un.request];
              env.doc_starts = m.doc_starts;  // the device copy
              env.num_docs = m.num_docs;
              env.v[kVarH] = kvh * G + row % G;
              env.v[kVarQ] = q_abs_of(m, un.q_begin + row / G);
              env.v[kVarKv] = key;
              env.v[kVarScore] = s[j][e] * p.sm_scale;
              x = static_cast<float>(eval_expr(p.score_ops, p.score_n, env)) * 1.4426950408889634f;
            } else {
              // the soft-cap / ALiBi variants run only when a soft-cap or ALiBi is set (flash_mode)
              x = s[j][e] * p.sm_scale;
              if (p.soft_cap > 0.f) x = p.soft_cap * softcap_tanh(x * inv_cap);
              // key - q as float: exact below 2^24, as the int difference the twins use
              if (p.alibi) x += rb.aslope[i] * (static_cast<float>(key) - rb.aq[i]);
              x *= 1.4426950408889634f;
            }
          }
          s[j][e] = x;
          tile_max[i] = fmaxf(tile_max[i], x);
        }
    }
  }

  // The output of block `blk`'s rows: O / den and LSE, final (dtype, natural log) or a split-KV
  // partial (fp32, base 2) for the merge kernel. kScaleV (an FP8 cache): O / den is multiplied by the
  // V scale v_scale here, before the final rounding to the dtype or before the partial is written (and
  // rounded, with dtype partials); cpu.tiled does the same (tiled_row.cpp). kQuadCols: O's head dims in
  // fp8_pv's order, o[2 m] / o[2 m + 1] holding dims 16 m + 4 t4 + {0, 2} / {1, 3} (else o[j]: 8 j + 2 t4 + {0, 1}).
  template <int D, class T, bool kScaleV = false, bool kQuadCols = false>
  __device__ __forceinline__ void store(int blk, const float (&o)[D / 8][4], const float (&mx)[2], const float (&den)[2],
                                        float v_scale = 1.f) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_of(blk, i);
      if (row >= it.row_end) continue;
      const int q_local = row / G;
      const int hd = kvh * G + row % G;
      const bool empty = den[i] == 0.f;  // no visible key and no sink (start_rows put the sink in den)
      const float inv = empty ? 0.f : 1.f / den[i];
      const float lse2 = empty ? -INFINITY : mx[i] + log2f(den[i]);
      if (p.split) {
        const int64_t pr = p.o_indptr[it.unit] + static_cast<int64_t>(q_local) * p.unit_chunks[it.unit] + it.kv_chunk;
        float* dst = p.part_o + (pr * p.hq + hd) * D;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          float a = o[j][2 * i] * inv, b = o[j][2 * i + 1] * inv;
          if constexpr (kQuadCols) a = o[j / 2 * 2][2 * i + j % 2] * inv, b = o[j / 2 * 2 + 1][2 * i + j % 2] * inv;
          if constexpr (kScaleV) a *= v_scale, b *= v_scale;
          if (p.round_partials) {
            a = round_to(Mma<T>::kDType, a);
            b = round_to(Mma<T>::kDType, b);
          }
          *reinterpret_cast<float2*>(dst + (kQuadCols ? 16 * (j / 2) + 4 * t4 + 2 * (j % 2) : 8 * j + 2 * t4)) =
              make_float2(a, b);
        }
        if (t4 == 0) p.part_lse[pr * p.hq + hd] = lse2;
      } else {
        const int64_t token = tok0 + q_local;
        T* dst = static_cast<T*>(p.o) + (token * p.hq + hd) * D;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          float a = o[j][2 * i] * inv, b = o[j][2 * i + 1] * inv;
          if constexpr (kQuadCols) a = o[j / 2 * 2][2 * i + j % 2] * inv, b = o[j / 2 * 2 + 1][2 * i + j % 2] * inv;
          if constexpr (kScaleV) a *= v_scale, b *= v_scale;
          *reinterpret_cast<uint32_t*>(dst + (kQuadCols ? 16 * (j / 2) + 4 * t4 + 2 * (j % 2) : 8 * j + 2 * t4)) =
              Mma<T>::pack(a, b);
        }
        if (t4 == 0) p.lse[token * p.hq + hd] = lse2 == -INFINITY ? -INFINITY : lse2 * 0.6931471805599453f;
      }
    }
  }
};

// The online-softmax step of one 16-row block after its logits: the new running maxima, the row sums
// rescaled by corr (returned: O's factor, for rescale_o), and P = exp2(fma(S, c, -max)) in place in s
// (fp32; the row sum uses it, as FA2 does). c: the logits' pending scale (FlashCta::exp_scale). The
// maxima are kept in base 2: max(S) x c rounds to the same float as max(S x c) (c > 0, rounding is
// monotonic), so folding the scale changes P's argument (one rounding instead of two) and nothing else.
template <int NT>
__device__ __forceinline__ void softmax_step(float (&s)[NT][4], float (&tile_max)[2], float (&mx)[2], float (&den)[2],
                                             float (&corr)[2], float c) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
    tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
    const float m_new = fmaxf(mx[i], tile_max[i] * c);
    // nothing visible yet: keep the state (exp2(-inf - -inf) would be NaN)
    corr[i] = m_new == -INFINITY ? 1.f : fast_exp2(mx[i] - m_new);
    mx[i] = m_new;
    den[i] *= corr[i];
  }
  // a row with nothing visible yet has only -inf logits: exp2(-inf - 0) = 0, one test per row instead
  // of one per element
  const float mref[2] = {mx[0] == -INFINITY ? 0.f : mx[0], mx[1] == -INFINITY ? 0.f : mx[1]};
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e / 2;
      const float pv = fast_exp2(fmaf(s[j][e], c, -mref[i]));
      s[j][e] = pv;
      den[i] += pv;  // the row sum uses fp32 P, as FA2 does
    }
}

// A warp whose rows all kept their maxima (every corr exactly 1, the common case once a row has seen
// its largest logits) skips the D / 2 multiplies: x * 1 is x, so the bits are the same. Called by
// whole warps.
template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[D / 8][4], const float (&corr)[2]) {
  if (__all_sync(0xffffffffu, corr[0] == 1.f && corr[1] == 1.f)) return;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    o[j][0] *= corr[0];
    o[j][1] *= corr[0];
    o[j][2] *= corr[1];
    o[j][3] *= corr[1];
  }
}

// P of one 16-row block as mma.sync's (and wgmma's register) A fragments, rounded to the dtype: k-step
// kk covers keys 16 kk .. 16 kk + 15 of the block's S fragments.
template <class T, int NT>
__device__ __forceinline__ void pack_p(const float (&s)[NT][4], uint32_t (&a)[NT / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// The quad's partial row sums of one block, summed across its four threads.
__device__ __forceinline__ void quad_row_sums(float (&den)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    den[i] += __shfl_xor_sync(0xffffffffu, den[i], 1);
    den[i] += __shfl_xor_sync(0xffffffffu, den[i], 2);
  }
}

// A tile's slot of the kernel's table in shared memory, filled a tile ahead: where each of its keys
// starts in the K / V pool (the byte offset of its row for this CTA's KV head, cuda.flash's dtypes
// being 2 bytes: no shift per copy; one thread per key; -1 past the tile list or the visible range: a
// zero-filled key) and the plan's full mark of the tile (item_tile_full, read by the logits of the
// tile: no global load in the softmax's path). The page lookup and the offset arithmetic run once per
// key here instead of once per 16-byte vector in every copy (each key is D / 8 vectors, copied for K
// and for V).
// In two halves, load_tile_page (the page lookup and its global loads) and store_tile_slot, so a
// kernel can issue the loads where its fetching warps would otherwise wait and store a tile's math
// later.
// The KV tiles an item visits, in order, as cpu.tiled does: every kKvTile-key tile from the one
// holding the first visible key (kv_lo; the grid starts at the item's first key), or the plan's list
// of the item's non-empty tiles with their full marks (a mask_mod's item_tiles; use_list false in a
// paired Hopper CTA, which never has one). No visible key: no tile.
struct ItemTiles {
  const int* list = nullptr;  // the plan's tile keys of the item (nullptr: the grid from `first`)
  int first = 0, n = 0;
  __device__ ItemTiles(const FlashCta& c, int kv_lo, int kv_hi, bool use_list) {
    const FlashParams& p = c.p;
    const bool any = kv_lo < kv_hi;
    first = any ? c.it.kv_begin + ((kv_lo - c.it.kv_begin) / kKvTile) * kKvTile : kv_hi;
    if (use_list && p.item_tiles) {
      list = p.item_tiles + p.item_tile_indptr[c.item];
      n = any ? p.item_tile_indptr[c.item + 1] - p.item_tile_indptr[c.item] : 0;
    } else {
      n = any ? (kv_hi - first + kKvTile - 1) / kKvTile : 0;
    }
  }
  __device__ int key(int i) const { return list ? list[i] : first + i * kKvTile; }
  // the plan's full mark of tile i of c's item (item_tile_full; none without a list). Its address is
  // rebuilt at each call rather than held: the two-CTA kernels sit at their register limit.
  __device__ bool full(const FlashCta& c, int i) const { return list && c.p.item_tile_full[c.p.item_tile_indptr[c.item] + i]; }
};

struct TilePage {
  int page = -1, slot = 0;  // this thread's key (-1: none)
  bool full = false;        // the tile's full mark (thread 0)
};
// Tile i of `tiles` (none past the last: every key -1); the full mark is read by one thread.
__device__ __forceinline__ TilePage load_tile_page(const FlashCta& c, int tid, const ItemTiles& tiles, int i, int kv_hi) {
  TilePage t;
  const bool valid_tile = i < tiles.n;
  if (tid < kKvTile) {
    const int key = (valid_tile ? tiles.key(i) : 0) + tid;
    if (valid_tile && key < kv_hi) {
      int col = 0;
      page_slot(c.p.view, key, &col, &t.slot);
      t.page = c.pages[col];
    }
  }
  if (tid == 0) t.full = valid_tile && tiles.full(c, i);
  return t;
}
// elem_bytes: 2 (the dtype's pool) or 1 (an FP8 cache's bytes)
__device__ __forceinline__ void store_tile_slot(const FlashCta& c, const TilePage& t, int64_t* slot_rows, bool* slot_full,
                                                int tid, int head_dim, int elem_bytes = 2) {
  if (tid < kKvTile)
    slot_rows[tid] = t.page >= 0
                         ? elem_bytes * kv_offset(c.p.view.layout, t.page, t.slot, c.kvh, 0, c.p.view.page_size, c.p.hk, head_dim)
                         : -1;
  if (tid == 0) *slot_full = t.full;
}

// Byte offset in the K / V pool of 16-byte vector cv of a key whose row starts at byte `row` (-1: none,
// then 0 and !*ok: keys past the range are zero, so 0 * P never meets a poisoned slot).
__device__ __forceinline__ int64_t kv_source(int64_t row, int cv, bool* ok) {
  *ok = row >= 0;
  return *ok ? row + cv * 16 : 0;
}
// the pool's byte at `offset` (K or V)
__device__ __forceinline__ const void* pool_at(const void* pool, int64_t offset) {
  return static_cast<const unsigned char*>(pool) + offset;
}

// Q row r's 16-byte vector cv (head dim D) of this CTA (r counts from the CTA's first row, as blocks
// do): zero for rows past the item.
template <int D, class T>
__device__ __forceinline__ uint4 q_vector(const FlashCta& c, int r, int cv) {
  const int row = c.it.row_begin + r - c.blk0 * 16;
  if (row >= c.it.row_end) return make_uint4(0, 0, 0, 0);
  const int64_t token = c.tok0 + row / c.G;
  const int head = c.kvh * c.G + row % c.G;
  return reinterpret_cast<const uint4*>(static_cast<const T*>(c.p.q) + (token * c.p.hq + head) * D)[cv];
}

// The KV tile loop both kernels run, with their copies as one cp.async group per tile:
// double-buffered (tile i + 1 copied into the other stage while tile i is computed, and the pages of
// tile i + 2 fetched), or lean (head dim 256: one K and one V buffer, K refilled as soon as S = Q K^T
// is done and V once P V is done, FlashAttention-2's schedule at this size). copy(i, k, v)
// issues tile i's K and / or V copies (the loop commits them as one group); fetch(i) loads the pages
// of tile i (a TilePage) and put(i, page) stores them into the tile's slot; qk(i) and pv(i) compute.
// kAsyncProxy: the reads are wgmma's (the async proxy), so each thread's landed copies are fenced to
// it before the barrier that publishes them.
// kShadow (wgmma, two stages): qk(i) only issues S = Q K^T, the loads of tile i + 2's pages run in
// its shadow, pv(i) waits for it, and the pages are stored after P V.
template <bool kLean, bool kAsyncProxy, bool kShadow, class Copy, class Fetch, class Put, class QK, class PV>
__device__ __forceinline__ void kv_tile_loop(int n_tiles, Copy&& copy, Fetch&& fetch, Put&& put, QK&& qk, PV&& pv) {
  static_assert(!kShadow || (kAsyncProxy && !kLean), "the shadow is an asynchronous S's, in the two-stage loop");
  auto publish = [] {
    if constexpr (kAsyncProxy) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // for wgmma
    __syncthreads();
  };
  put(0, fetch(0));
  put(1, fetch(1));
  __syncthreads();  // tiles 0 and 1's pages
  if (n_tiles > 0) {
    copy(0, true, !kLean);  // lean: V(0) at the top of the first iteration
    cp_async_commit();
  }
  for (int ti = 0; ti < n_tiles; ++ti) {
    if constexpr (!kLean) {
      // one barrier per tile: tile ti (the one group in flight) is published, and every warp is past
      // tile ti - 1, whose stage then takes tile ti + 1 (its copies overlap tile ti's math)
      cp_async_wait<0>();
      publish();
      if (ti + 1 < n_tiles) {
        copy(ti + 1, true, true);
        cp_async_commit();
      }
      if constexpr (kShadow) {
        // tile ti + 2's slot was tile ti - 1's, whose copies and logits every warp is past; the
        // store is published by the next iteration's barrier, before tile ti + 2's copies
        qk(ti);
        const TilePage next = fetch(ti + 2);
        pv(ti);
        put(ti + 2, next);
      } else {
        if (ti + 1 < n_tiles) put(ti + 2, fetch(ti + 2));
        qk(ti);
        pv(ti);
      }
      continue;
    }
    // lean, two barriers per tile: at the top K(ti) is the one group in flight, and every warp is
    // past P(ti - 1) V(ti - 1), so V(ti) goes into the V buffer; after S = Q K^T every warp is done
    // with K(ti), so K(ti + 1) goes into the K buffer during the softmax and P V
    cp_async_wait<0>();
    publish();
    copy(ti, false, true);
    cp_async_commit();
    qk(ti);
    cp_async_wait<0>();
    publish();
    if (ti + 1 < n_tiles) {
      copy(ti + 1, true, false);
      cp_async_commit();
      put(ti + 2, fetch(ti + 2));
    }
    pv(ti);
  }
}

// The KV tile loop of the FP8 kernels (FlashMode::kPlainFp8): copy(i) lands tile i's K and V bytes in
// FP8 staging buffer i % kStages (cp.async, one group per tile: an empty group past the last tile keeps
// the count). Per tile: the wait for tile i and a barrier (tile i's bytes are published; everyone is
// past tile i - 1's math, so tile i - 1's staging buffer takes tile i + kStages - 1, whose copies overlap
// the math). kConvert: convert(i) then turns the bytes into the one dtype K / V tile that qk and pv read
// (every warp past tile i - 1 has left it free), and a second barrier publishes it. Else each warp
// copies, fetches the pages of and reads only its own keys, so the barrier is the warp's: warps run
// apart. The pages of tile i + kStages are loaded before the conversion or the math and stored after
// it, in slot (i + kStages) % (kStages + 1): tile i - 1's, which everyone is past.
template <int kStages, bool kConvert, class Copy, class Convert, class Fetch, class Put, class QK, class PV>
__device__ __forceinline__ void kv_tile_loop_fp8(int n_tiles, Copy&& copy, Convert&& convert, Fetch&& fetch, Put&& put, QK&& qk,
                                                 PV&& pv) {
  static_assert(kStages >= 2, "a tile in flight while one is computed");
  auto sync = [] {
    if constexpr (kConvert)
      __syncthreads();
    else
      __syncwarp();
  };
  for (int i = 0; i < kStages; ++i) put(i, fetch(i));
  sync();  // tiles 0 .. kStages - 1's pages
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) copy(i);
    cp_async_commit();
  }
  for (int ti = 0; ti < n_tiles; ++ti) {
    cp_async_wait<kStages - 2>();
    sync();
    if (ti + kStages - 1 < n_tiles) copy(ti + kStages - 1);
    cp_async_commit();
    const TilePage next = fetch(ti + kStages);
    if constexpr (kConvert) {
      convert(ti);
      put(ti + kStages, next);
      __syncthreads();
      qk(ti);
      pv(ti);
    } else {
      qk(ti);
      pv(ti);
      put(ti + kStages, next);
    }
  }
}

}  // namespace attnscope::cuda
