// vLLM's make_local_attention_virtual_batches, one request at a time (conventions.md section 6).
#include "attnscope/local_batches.h"

#include <algorithm>

namespace attnscope {

VirtualBatches make_virtual_batches(const CaseSpec& c, const PageTable& pt) {
  VirtualBatches vb;
  if (!c.attention.local_chunk) return vb;
  const int ch = *c.attention.local_chunk;
  const int ps = pt.page_size;
  vb.chunk = ch;
  vb.cu_q.push_back(0);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    vb.request_first.push_back(static_cast<int>(vb.batches.size()));
    const int q_len = c.requests[r].q_len;
    const int kv_len = c.requests[r].kv_len;
    const int ctx = kv_len - q_len;
    int q_done = 0;
    int start = (ctx / ch) * ch;  // chunk holding the first new token
    while (q_done < q_len) {
      // first virtual batch: the rest of the chunk the context ends in; then whole chunks
      const int room = (q_done == 0) ? ch - ctx % ch : ch;
      const int q = std::min(room, q_len - q_done);
      VirtualBatch b;
      b.request = r;
      b.q_begin = q_done;
      b.q_len = q;
      b.kv_begin = start;
      b.kv_len = std::min(ch, kv_len - start);  // the last is kv_len % ch (or ch)
      const int width = ch / ps;
      const int first = start / ps;
      const int pages = pt.pages_of(r);
      for (int i = 0; i < width; ++i) {
        const int col = std::min(first + i, pages - 1);  // clipped to the table width, as vLLM does
        b.block_table.push_back(pt.indices[pt.indptr[r] + col]);
      }
      vb.batches.push_back(std::move(b));
      vb.cu_q.push_back(vb.cu_q.back() + q);
      q_done += q;
      start += ch;
    }
  }
  vb.request_first.push_back(static_cast<int>(vb.batches.size()));
  return vb;
}

}  // namespace attnscope
