#!/usr/bin/env bash
# Screenshots of the GUI on a GPU machine that has no X server, no Mesa and no GLFW (the device
# machine): the GUI binary and a software X stack travel as one archive, .carry/gui-x.tar.xz, made on
# a Debian 12 build machine by scripts/pack-gui-x.sh (Xvfb, xkbcomp and the XKB data, Mesa's llvmpipe
# swrast_dri.so with libLLVM-15, libglvnd, GLFW, stb, and build/app/gui/attnscope). Libraries the GPU
# machine already has (X11, xcb, libdrm, libxml2, ...) are left out of the archive.
#
# usage: bash scripts/gpu-screenshot.sh CASE.json OUTDIR TAB [TAB ...]   (tabs: mask pages local split diff timing)
# ATTNSCOPE_GUI_ARGS: more options for each run (e.g. "--edit-latency 10": the edit-to-results times)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 CASE.json OUTDIR TAB [TAB ...]" >&2; exit 2; }
case_json=$(realpath "$1"); out=$(realpath -m "$2"); shift 2
mkdir -p "$out"
gx=/tmp/gx
[ -x "$gx/bin/Xvfb" ] || { mkdir -p /tmp && tar xJf .carry/gui-x.tar.xz -C /tmp || { echo "cannot unpack .carry/gui-x.tar.xz" >&2; exit 1; }; }

export LD_LIBRARY_PATH="$gx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The GUI was built against cuDNN 9.19 (the build machine's); PyTorch's cuDNN wheel is that version
# on the GPU machine, the toolkit's may be older.
cw=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$cw" ] && [ -d "$cw/lib" ] && export LD_LIBRARY_PATH="$cw/lib:$LD_LIBRARY_PATH"
export LIBGL_DRIVERS_PATH="$gx/dri" __GLX_VENDOR_LIBRARY_NAME=mesa LIBGL_ALWAYS_SOFTWARE=1 GALLIUM_DRIVER=llvmpipe

for b in "$gx/bin/Xvfb" "$gx/bin/xkbcomp" "$gx/bin/attnscope" "$gx/dri/swrast_dri.so"; do
  miss=$(ldd "$b" 2>&1 | grep "not found")
  [ -z "$miss" ] || { echo "$b: missing libraries:"; echo "$miss"; }
done

# Xvfb runs the XKB compiler from its compiled-in bindir (/usr/bin); there is no option to move it,
# so a missing /usr/bin/xkbcomp is linked to the archive's (the machine is a throwaway, and root).
[ -x /usr/bin/xkbcomp ] || ln -s "$gx/bin/xkbcomp" /usr/bin/xkbcomp 2>/dev/null || echo "warning: no /usr/bin/xkbcomp, keyboard setup may fail"

disp=:99
"$gx/bin/Xvfb" $disp -screen 0 1600x1000x24 -xkbdir "$gx/xkb" -nolisten tcp > "$out/xvfb.log" 2>&1 &
xpid=$!
for _ in $(seq 50); do [ -e /tmp/.X11-unix/X99 ] && break; sleep 0.1; done
if ! kill -0 $xpid 2>/dev/null; then echo "Xvfb did not start:"; cat "$out/xvfb.log"; exit 1; fi
export DISPLAY=$disp

rc=0
for tab in "$@"; do
  LIBGL_DEBUG=verbose timeout 300 "$gx/bin/attnscope" "$case_json" --screenshot "$out/$tab.png" --tab "$tab" --size 1600x1000 \
    ${ATTNSCOPE_GUI_ARGS:-} > "$out/gui-$tab.log" 2>&1
  r=$?; echo "tab $tab: rc=$r"; grep -E "screenshot|error|libGL|attnscope:|edit latency|debounce" "$out/gui-$tab.log" | head -8
  [ $r -eq 0 ] || rc=1
done
kill $xpid 2>/dev/null
exit $rc
