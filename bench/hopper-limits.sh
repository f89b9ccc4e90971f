#!/usr/bin/env bash
# The Hopper-limits table of issue 45 (README, "Benchmarks"): attnscope's kernels against the copy
# bandwidth measured in each run and against the best peer, on one GPU. Each row is one
# `attnscope-cli bench CASE --backends ... --json` run; bench/hopper_limits.py prints the table.
# Usage: bench/hopper-limits.sh [path/to/attnscope-cli] [reps]   (default build/app/attnscope-cli, 30)
# FlashAttention-3 (python.fa3) runs where the worker's Python imports fa3_fwd (docs/python-backends.md);
# elsewhere its cells say why not.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cli="${1:-$here/../build/app/attnscope-cli}"
reps="${2:-30}"
py="${ATTNSCOPE_PYTHON:-python3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
run() {  # name case backends
  echo "hopper-limits: $2 ($3)" >&2
  "$cli" bench "$here/$2" --backends "$3" --reps "$reps" --json > "$out/$1.json" 2> "$out/$1.err"
  [ -s "$out/$1.json" ] || echo "hopper-limits: $2 gave no result: $(tail -1 "$out/$1.err")" >&2
}
run dec-bf16 decode-64x8192-bf16.json cuda.flash,flashinfer.decode
run dec-fp8 decode-64x8192-fp8.json cuda.flash,flashinfer.decode
run mla mla-decode-64x4096.json cuda.flash,flashinfer.mla_sm90
run pre-causal prefill-hd128-causal-paged.json cuda.flash,cudnn.sdpa,python.fa3
run pre-full prefill-hd128-noncausal-paged.json cuda.flash,cudnn.sdpa,python.fa3
run sinks-on gpt-oss-prefill-4x4096-w128-sinks.json cuda.flash,flashinfer.prefill
run sinks-off gpt-oss-prefill-4x4096-w128.json cuda.flash,flashinfer.prefill
"$py" "$here/hopper_limits.py" "$out"
