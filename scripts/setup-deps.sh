#!/usr/bin/env bash
# Installs attnscope's system dependencies from Debian packages, then the pinned headers of the
# real-library backends from PyPI (scripts/fetch-peers.sh, into the git-ignored .deps/). Idempotent: packages already
# present are left alone, and apt-get runs only when something is missing.
# The CUDA toolkit is not a Debian package here; when nvcc is on PATH (or in /usr/local/cuda/bin)
# the GPU backends are built, otherwise they are stubs that report "not compiled".
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  nlohmann-json3-dev libgtest-dev
  # GUI: GLFW + OpenGL 3.3 + Dear ImGui (with its GLFW/OpenGL3 backends), stb for PNG screenshots
  libglfw3-dev libimgui-dev libstb-dev libgl-dev
  # GUI tests run under a virtual X server
  xvfb xauth libgl1-mesa-dri
  clang-format
  # scripts/fetch-peers.sh downloads the pinned wheels whose headers the real-library backends use
  python3 python3-pip
  # tests/cli/test_export_script.cpp runs the generated repro scripts' numpy-only reference check
  python3-numpy
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#pkgs[@]} packages present"
  bash "$(dirname "$0")/fetch-peers.sh"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup-deps: done"
bash "$(dirname "$0")/fetch-peers.sh"
