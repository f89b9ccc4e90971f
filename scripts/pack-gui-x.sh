#!/usr/bin/env bash
# Packs .carry/gui-x.tar.xz for scripts/gpu-screenshot.sh: the GUI binary (build/app/gui/attnscope)
# and a software X stack from Debian packages (Xvfb, xkbcomp and the XKB data, Mesa's swrast_dri.so
# with libLLVM-15, libglvnd, GLFW, stb), leaving out every library the GPU machine already has.
# usage: bash scripts/pack-gui-x.sh DEVICE_LDCONFIG.txt   (the output of `ldconfig -p` on the GPU machine)
# ATTNSCOPE_GUI_BINARY: the GUI to pack (default build/app/gui/attnscope)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 DEVICE_LDCONFIG.txt" >&2; exit 2; }
device_libs=$(realpath "$1")
gui=$(realpath "${ATTNSCOPE_GUI_BINARY:-build/app/gui/attnscope}")  # a CUDA build's GUI lives in its own build folder
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
( cd "$work/debs" && apt-get download xvfb x11-xkb-utils xkb-data libgl1-mesa-dri libglx-mesa0 libgl1 libglvnd0 \
  libglx0 libopengl0 libglapi-mesa libllvm15 libz3-4 libsensors5 libglfw3 libstb0 libpixman-1-0 libxfont2 \
  libfontenc1 libxkbfile1 libxshmfence1 libunwind8 libdrm-nouveau2 libdrm-radeon1 libdrm-intel1 libxcb-glx0 \
  libxcb-dri2-0 libxcb-dri3-0 libxcb-present0 libxcb-sync1 libxcb-xfixes0 libxcb-randr0 libxcb-shm0 libx11-xcb1 \
  libxxf86vm1 libxfixes3 libfreetype6 >/dev/null )
for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/root"; done
r="$work/root"
# The DT_NEEDED closure of the programs and the GL driver, minus what the GPU machine has.
python3 - "$r" "$device_libs" "$gui" > "$work/carry.txt" <<'PY'
import os, re, subprocess, sys
root, dev, gui = sys.argv[1:4]
have = {l.split()[0] for l in open(dev) if "=>" in l}
base = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2",
        "libstdc++.so.6", "libgcc_s.so.1", "libresolv.so.2"}
dirs = [root + "/usr/lib/x86_64-linux-gnu", root + "/lib/x86_64-linux-gnu"]
lib = root + "/usr/lib/x86_64-linux-gnu"
todo = [root + "/usr/bin/Xvfb", root + "/usr/bin/xkbcomp", gui, lib + "/dri/swrast_dri.so", lib + "/libGLX_mesa.so.0",
        lib + "/libGL.so.1"]
seen, out = set(), {lib + "/libGLX_mesa.so.0"}
while todo:
    elf = subprocess.run(["readelf", "-d", todo.pop()], capture_output=True, text=True).stdout
    for n in re.findall(r"Shared library: \[(.+?)\]", elf):
        if n in seen or n in base or n in have:
            continue
        seen.add(n)
        hit = [os.path.join(d, n) for d in dirs if os.path.exists(os.path.join(d, n))]
        if not hit:
            sys.exit(f"pack-gui-x: {n} is in no package fetched and not on the GPU machine")
        out.add(hit[0]); todo.append(hit[0])
print("\n".join(sorted(out)))
PY
gx="$work/gx"
mkdir -p "$gx/lib" "$gx/dri" "$gx/bin" "$gx/xkb"
xargs -a "$work/carry.txt" -I{} cp -L {} "$gx/lib/"
cp -L "$r/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so" "$gx/dri/"
cp "$r/usr/bin/Xvfb" "$r/usr/bin/xkbcomp" "$gui" "$gx/bin/"
cp -r "$r/usr/share/X11/xkb/." "$gx/xkb/"
mkdir -p .carry
tar cf - -C "$work" gx | xz -9 -T"$(nproc)" > .carry/gui-x.tar.xz
ls -la .carry/gui-x.tar.xz
