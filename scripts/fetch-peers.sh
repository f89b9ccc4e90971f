#!/usr/bin/env bash
# Fetches the pinned headers of the real-library backends from PyPI into .deps/ (git-ignored):
# FlashInfer (flashinfer-python), a CCCL newer than CUDA 13.0's (FlashInfer 0.7 needs
# cuda::fast_mod_div), the cuDNN frontend, NCCL (headers and library, where a CUDA toolkit is), and
# FlashAttention-2's kernel sources (flash-attn, an sdist: see fetch_sdist below). Only header / kernel
# trees (and NCCL's library) are unpacked; nothing is installed into Python and nothing is committed.
# Idempotent: a pin already unpacked is kept.
# A failure here is not fatal to the build: CMake then reports the family as "not found".
set -uo pipefail
cd "$(dirname "$0")/.."
deps="${ATTNSCOPE_DEPS:-$PWD/.deps}"
mkdir -p "$deps/wheels"

# name==version  unpack-dir  subtrees of the wheel to unpack
pins=(
  "flashinfer-python==0.7.2.post1|flashinfer|flashinfer/data/include/* flashinfer/data/cutlass/include/* flashinfer/data/cutlass/tools/util/include/* flashinfer/data/csrc/batch_prefill_customize_config.jinja flashinfer/data/csrc/batch_decode_customize_config.jinja flashinfer/data/csrc/batch_prefill_sm90_customize_config.jinja"
  "nvidia-cuda-cccl==13.3.5.0.6|cccl|nvidia/cu13/include/*"
  "nvidia-cudnn-frontend==1.32.0|cudnn-frontend|include/*"
)
# NCCL (issue 44: partials gathered across GPUs): headers and libnccl.so.2 from the wheel PyTorch 2.11
# for CUDA 13 depends on (its METADATA: nvidia-nccl-cu13==2.28.9). Fetched only where a CUDA toolkit
# is, since nothing without one can use it (CI has none, and the wheel is ~200 MB).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  pins+=("nvidia-nccl-cu13==2.28.9|nccl|nvidia/nccl/include/* nvidia/nccl/lib/*")
fi

py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "fetch-peers: python3 -m pip is not available; real-library backends will be 'not compiled'" >&2
  exit 0
fi

for entry in "${pins[@]}"; do
  IFS='|' read -r pin dir trees <<<"$entry"
  stamp="$deps/$dir/.pin"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pin" ]; then continue; fi
  name="${pin%%==*}"
  # The headers are the same in every platform wheel; ask for one manylinux x86_64 cp311 build so
  # the download does not depend on the local Python.
  if ! "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_18_x86_64 --platform manylinux2014_x86_64 --platform any -d "$deps/wheels" "$pin" >"$deps/wheels/$dir.log" 2>&1; then
    echo "fetch-peers: could not download $pin (see $deps/wheels/$dir.log)" >&2
    continue
  fi
  whl=$(ls "$deps"/wheels/"$(echo "$name" | tr - _)"-"${pin#*==}"-*.whl 2>/dev/null | head -1)
  if [ -z "$whl" ]; then echo "fetch-peers: no wheel file for $pin" >&2; continue; fi
  rm -rf "$deps/$dir"
  mkdir -p "$deps/$dir"
  # shellcheck disable=SC2086
  if ! (cd "$deps/$dir" && "$py" - "$whl" $trees <<'PYEOF'
import fnmatch, sys, zipfile
whl, pats = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if any(fnmatch.fnmatch(n, p) for p in pats)]
    z.extractall(".", names)
print(f"  {len(names)} files")
PYEOF
  ); then echo "fetch-peers: could not unpack $whl" >&2; continue; fi
  echo "$pin" > "$stamp"
  echo "fetch-peers: $pin -> $deps/$dir"
  rm -f "$whl"
done

# flash-attn is published as an sdist only, and `pip download` of an sdist runs its setup.py (which
# imports torch). So the tarball is fetched by URL from PyPI's JSON API and checked against the
# sha256 that JSON gives; only the kernel sources (csrc/flash_attn/src), flash_api.cpp (read for its
# num_splits_heuristic at configure time, never compiled) and CUTLASS's headers are unpacked.
fetch_sdist() {
  local name=$1 version=$2 dir=$3
  shift 3
  local pin="$name==$version" stamp="$deps/$dir/.pin"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pin" ]; then return 0; fi
  local tgz="$deps/wheels/$name-$version.tar.gz"
  if ! "$py" - "$name" "$version" "$tgz" >"$deps/wheels/$dir.log" 2>&1 <<'PYEOF'
import hashlib, json, sys, urllib.error, urllib.parse, urllib.request
name, version, out = sys.argv[1:4]
# The per-version page is tried first; some indexes serve only the project page (its "releases").
files = None
for url in (f"https://pypi.org/pypi/{name}/{version}/json", f"https://pypi.org/pypi/{name}/json"):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            d = json.load(r)
    except (urllib.error.URLError, ValueError) as e:
        print(f"{url}: {e}")
        continue
    files = d.get("urls") if url.endswith(f"/{version}/json") else d.get("releases", {}).get(version)
    if files:
        break
sdists = [f for f in (files or []) if f.get("packagetype") == "sdist"]
if not sdists:
    sys.exit(f"no sdist of {name}=={version} in PyPI's JSON")
f = sdists[0]
src = urllib.parse.urljoin(url, f["url"])
with urllib.request.urlopen(src, timeout=300) as r:
    data = r.read()
got = hashlib.sha256(data).hexdigest()
if got != f["digests"]["sha256"]:
    sys.exit(f"{src}: sha256 {got} != {f['digests']['sha256']} (PyPI's JSON)")
open(out, "wb").write(data)
print(f"{src}: {len(data)} bytes, sha256 {got}")
PYEOF
  then
    echo "fetch-peers: could not download $pin (see $deps/wheels/$dir.log)" >&2
    return 0
  fi
  rm -rf "$deps/$dir"
  mkdir -p "$deps/$dir"
  local top="${name//-/_}-$version"
  local pats=()
  for t in "$@"; do pats+=("$top/$t"); done
  if ! tar xzf "$tgz" -C "$deps/$dir" --strip-components=1 --wildcards "${pats[@]}"; then
    echo "fetch-peers: could not unpack $tgz" >&2
    rm -rf "$deps/$dir"
    return 0
  fi
  echo "$pin" >"$stamp"
  echo "fetch-peers: $pin -> $deps/$dir ($(find "$deps/$dir" -type f | wc -l) files)"
  rm -f "$tgz"
}
fetch_sdist flash-attn 2.8.3.post2 flash-attn 'csrc/flash_attn/src/*' 'csrc/flash_attn/flash_api.cpp' 'csrc/cutlass/include/*'
exit 0
