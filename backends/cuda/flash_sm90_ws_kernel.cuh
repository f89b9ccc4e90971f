// cuda.flash's warp-specialised Hopper kernel (sm_90a): the plan's 128-row tiles at head dims 64 and
// 128, plain or soft-cap / ALiBi (the bit-less variants), one CTA per SM in FlashAttention-3's structure. Three
// warpgroups: the last is the producer, which gathers each K / V tile from the paged cache with
// cp.async into a ring of kFlashWsStages stages and hands it over through an mbarrier; the first two
// are the consumers, 64 rows each, which take the producer's registers (setmaxnreg) and run without
// a CTA barrier in the loop. Each consumer overlaps its own work (FlashAttention-3's intra-warpgroup
// pipelining): S(i) = Q K(i)^T and O += P(i-1) V(i-1) are issued together, and the softmax of tile
// i runs while P(i-1) V(i-1) is on the tensor cores.
// The numerics are flash_sm90_kernel's: the same tiles in the same order, the same logits and
// online-softmax step per 64-key plan tile (flash_device.cuh), and O's operations in the same order
// (O x corr(i-1), += P(i-1) V(i-1), x corr(i), += P(i) V(i) ...), so the same bits (the GPU tests
// hold it against the two-CTA form and the mma.sync kernel). Opt-in (FlashDebugOptions::ws): slower
// than the two-CTA form on every shape measured so far.
#pragma once

#include "flash_device.cuh"
#include "sm90_primitives.cuh"

namespace attnscope::cuda {

template <int D, class T, FlashMode kMode>
__global__ void __launch_bounds__(384, 1) flash_sm90_ws_kernel(const FlashParams p) {
  static_assert(D == 64 || D == 128, "a 128-row tile's consumers hold O at head dims 64 and 128");
  static_assert(flash_mode_bitless(kMode), "no tile lists, no bits: the plain and soft-cap / ALiBi variants");
  constexpr int kRows = 128, kConsumers = 256, kStages = kFlashWsStages;
  constexpr int kVec = D / 8;      // 16-byte vectors per row
  constexpr int NT = kKvTile / 8;  // S n-tiles per warp
  constexpr int kTileBytes = kKvTile * D * 2;
  if (static_cast<int>(blockIdx.x) >= p.num_items) return;  // CUDA-graph padding CTA

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* qs = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* stages = qs + kRows * D * 2;  // stage st: K at st * 2 tiles, V one tile after
  __shared__ int s_lo, s_hi, s_rlo[kRows], s_rhi[kRows], s_wlo[8], s_whi[8];
  __shared__ int64_t s_row[3][kKvTile];  // the producer's table of key offsets: tile i in slot i % 3
  __shared__ bool s_full[3];             // (store_tile_slot's full marks: unused by the bit-less variants)
  // full: the producer's copies of the stage landed (its 128 threads' cp.async arrivals); empty:
  // every consumer warp is done with it
  __shared__ __align__(8) uint64_t s_full_bar[kStages], s_empty_bar[kStages];

  const int tid = threadIdx.x, warp = tid / 32, wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  const bool producer = wg == 2;
  const FlashCta c(p, tid);

  // Q rows -> shared memory (the consumers, swizzled; invalid rows are zero), the barriers, the rows'
  // key ranges
  if (!producer) {
    for (int i = tid; i < kRows * kVec; i += kConsumers) {
      const int r = i / kVec, cv = i % kVec;
      *reinterpret_cast<uint4*>(qs + sw128_offset(r, cv, kRows)) = q_vector<D, T>(c, r, cv);
    }
  }
  if (tid == 0) {
    s_lo = INT_MAX;
    s_hi = INT_MIN;
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s_full_bar[i], 128);
      mbar_init(&s_empty_bar[i], kConsumers / 32);
    }
  }
  __syncthreads();
  if (!producer) c.row_ranges(warp, &s_lo, &s_hi, s_rlo, s_rhi, s_wlo, s_whi);
  const FlashRowBlock<kMode> rows = c.row_block<kMode>(producer ? 0 : warp);
  fence_async_shared();  // Q's stores, before wgmma reads them
  __syncthreads();       // s_lo / s_hi final
  const int kv_lo = s_lo, kv_hi = s_hi;
  const ItemTiles tiles(c, kv_lo, kv_hi, false);
  const int n_tiles = tiles.n;

  if (producer) {
    // tile i's key offsets are in slot i % 3 of s_row (store_tile_slot: one thread per key); tile
    // i + 2's page loads are issued before tile i's copies and stored after them (their latency
    // behind the copies), published by the producer's barrier at the top of iteration i + 1; slot
    // (i + 2) % 3 was tile i - 1's, whose copies every producer thread is past at the top of i
    regs_dealloc<40>();
    const int t = tid - kConsumers;
    auto put = [&](int i, const TilePage& pg) { store_tile_slot(c, pg, s_row[i % 3], &s_full[i % 3], t, D); };
    put(0, load_tile_page(c, t, tiles, 0, kv_hi));
    put(1, load_tile_page(c, t, tiles, 1, kv_hi));
    // this thread's copies: vector cv of keys r0 + 8 l (128 threads over kVec vectors per key), so
    // its shared-memory destinations are one base plus constants and its sources the key's row plus
    // one constant per thread, folded into the pool bases
    static_assert(128 % kVec == 0, "a thread keeps its vector column");
    constexpr int kKeyStep = 128 / kVec, kLoads = kKvTile / kKeyStep;
    const int r0 = t / kVec, cv = t % kVec;
    const unsigned char* kbase = static_cast<const unsigned char*>(p.k) + cv * 16;
    const unsigned char* vbase = static_cast<const unsigned char*>(p.v) + cv * 16;
    const int dst0 = sw128_offset(r0, cv, kKvTile);  // + l * kKeyStep * 128: r0 % 8 is kept
    static_assert(kKeyStep % 8 == 0, "the swizzle phase of a thread's keys stays r0 % 8");
    int st = 0, phase = 0;
    for (int i = 0; i < n_tiles; ++i) {
      named_barrier(1, 128);
      const TilePage next = load_tile_page(c, t, tiles, i + 2, kv_hi);
      mbar_wait(&s_empty_bar[st], phase ^ 1);  // the consumers are done with tile i - kStages
      unsigned char* ks = stages + st * 2 * kTileBytes + dst0;
      const int64_t* slot_rows = s_row[i % 3] + r0;
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const int64_t row = slot_rows[l * kKeyStep];  // -1: a zero-filled key
        const bool ok = row >= 0;
        const int64_t off = ok ? row : 0;
        cp_async16(ks + l * kKeyStep * 128, kbase + off, ok);
        cp_async16(ks + kTileBytes + l * kKeyStep * 128, vbase + off, ok);
      }
      cp_async_mbar_arrive(&s_full_bar[st]);
      put(i + 2, next);
      if (++st == kStages) st = 0, phase ^= 1;
    }
    cp_async_wait<0>();
    return;
  }

  // the consumers
  regs_alloc<232>();
  const int lane = tid % 32;
  const float inv_cap = FlashRowBlock<kMode>::kCapAlibi && p.soft_cap > 0.f ? 1.f / p.soft_cap : 0.f;
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, den[2] = {0.f, 0.f};
  float s[NT][4];
  uint32_t a[NT / 2][4];  // P of the previous tile as wgmma's A fragments
  // descriptors as in flash_sm90_kernel: two bases, Q's rows, the stages and the k-steps are offsets
  const Sw128Desc kmaj = sw128_desc_base(qs, 16, 1024), vmaj = sw128_desc_base(qs, kKvTile * 128, 1024);
  const uint32_t q_off = wg * 64 * 128, stage_off = static_cast<uint32_t>(stages - qs);
  auto issue_qk = [&](int st) { wgmma_qk_tile<T, D, kRows, kKvTile>(&s[0][0], kmaj, q_off, stage_off + st * 2 * kTileBytes); };
  auto issue_pv = [&](int st) {
    const uint32_t vs = stage_off + st * 2 * kTileBytes + kTileBytes;
    wgmma_hold<D / 2>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) Wgmma<T>::pv<D>(&o[0][0], a[kk], vmaj.at(vs + kk * 2048));
    wgmma_commit();
  };
  // the logits and online-softmax step of tile ti (S in s: P in fp32 after it), O's factor in corr
  auto softmax = [&](int ti, float(&corr)[2]) {
    float tile_max[2];
    c.logits<kMode, NT>(s, tile_max, rows, warp, tiles.key(ti), false, s_rlo, s_rhi, s_wlo, s_whi, inv_cap);
    softmax_step<NT>(s, tile_max, mx, den, corr, c.exp_scale<kMode>());
  };
  // stage and phase of the tile being read, kept incrementally
  int st = 0, phase = 0, prev_st = 0;
  auto wait_full = [&] {
    mbar_wait(&s_full_bar[st], phase);
    fence_async_shared();  // the producer's cp.async writes, before this thread's wgmma reads
  };
  auto advance = [&] {
    prev_st = st;
    if (++st == kStages) st = 0, phase ^= 1;
  };
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) mbar_arrive(&s_empty_bar[stage]);
  };
  // The two consumers take turns on the tensor cores (FlashAttention-3's ping-pong): a warpgroup
  // issues its products only once the other has issued its own, so one's softmax runs beside the
  // other's products instead of both waiting on the tensor cores at once. Named barriers 2 and 3 (a
  // warpgroup's turn): it syncs on its own (its 128 threads and the other's 128 arrivals) and
  // arrives on the other's after issuing. The second starts by giving the first its turn, and skips
  // its last arrival (nobody waits for it): both issue n_tiles + 1 times.
  auto my_turn = [&] { named_barrier(2 + wg, 256); };
  auto your_turn = [&] { asm volatile("bar.arrive %0, 256;\n" ::"r"(3 - wg) : "memory"); };

  if (n_tiles > 0) {
    float corr[2];
    if (wg == 1) your_turn();
    wait_full();
    my_turn();
    issue_qk(st);
    your_turn();
    advance();
    wgmma_wait<0>();
    wgmma_hold<NT * 4>(&s[0][0]);
    softmax(0, corr);
    rescale_o<D>(o, corr);
    pack_p<T, NT>(s, a);
    for (int ti = 1; ti < n_tiles; ++ti) {
      wait_full();
      my_turn();
      issue_qk(st);       // S(ti): s is free (P(ti - 1) is packed in a)
      issue_pv(prev_st);  // O += P(ti - 1) V(ti - 1)
      your_turn();
      const int done_st = prev_st;
      advance();
      wgmma_wait<1>();  // S(ti) done (groups complete in order)
      wgmma_hold<NT * 4>(&s[0][0]);
      softmax(ti, corr);
      wgmma_wait<0>();  // P(ti - 1) V(ti - 1) done: its stage and a are free
      wgmma_hold<D / 2>(&o[0][0]);
      wgmma_hold_u32<NT * 2>(&a[0][0]);
      release(done_st);
      rescale_o<D>(o, corr);
      pack_p<T, NT>(s, a);
    }
    my_turn();
    issue_pv(prev_st);
    if (wg == 0) your_turn();
    wgmma_wait<0>();
    wgmma_hold<D / 2>(&o[0][0]);
    release(prev_st);
  }

  quad_row_sums(den);
  c.store<D, T>(warp, o, mx, den);
}

}  // namespace attnscope::cuda
