#!/usr/bin/env bash
# bundle.sh OUT — builds zrt with CUDA and NCCL (release) and copies into OUT what the GPU
# machine needs to run its checks (run-gpu-checks.sh) without building anything there: that
# machine has the GPU driver, CUDA 13, PyTorch (with NCCL as its pip package nvidia-nccl-cu13)
# and Python, but no Debian packages (no UCX, fmt, hwloc, OpenBLAS, GoogleTest).
#
#   OUT/bin/    the CUDA tests (tests/cuda), zrt-bench, zrt-run, train_lm, zrt-gpu-probe,
#               stripped, RPATH $ORIGIN/../lib
#   OUT/lib/    libzrt and every shared library these load, found with ldd (recursively), except
#               the C library and its loader, the GPU driver (libcuda, libnvidia-*) and NCCL;
#               RPATH $ORIGIN. lib/ucx/ holds UCX's transport modules, which libucs dlopens from
#               the folder "ucx" beside itself (and from UCX_MODULE_DIR, which run-gpu-checks.sh
#               sets to the same folder).
#   OUT/share/  a small corpus for train_lm (the GPU machine has no /usr/share/dict/words)
#   OUT/MANIFEST what was built, from what, and every file with its size
#
# Choices, and why:
# - NCCL is not copied: libnccl.so.2 is 218 MB (its device code for every GPU generation, which
#   does not compress), over the 64 MiB that travels to the GPU machine. run-gpu-checks.sh takes
#   the machine's own (PyTorch's nvidia-nccl-cu13, or $ZRT_NCCL_LIB_DIR); libnccl.so.2 keeps its
#   ABI across 2.x, and `ldd -r` there names any symbol that an older NCCL would lack.
# - libstdc++ and libgcc_s are copied: the binaries need the GLIBCXX of the g++ that built them,
#   and the GPU machine's may be older. A newer one there would also do, but nothing else in
#   these processes needs one (the driver and NCCL link no libstdc++), so ours is safe to use.
# - RPATH rather than RUNPATH: RPATH is searched before LD_LIBRARY_PATH, so a CUDA runtime or
#   libstdc++ on the GPU machine's LD_LIBRARY_PATH cannot replace the bundle's.
# - Device code for sm_90 only (the H200; ZRT_BUNDLE_ARCHS overrides), to keep libzrt small.
# - UCX's modules: cma only. ib and rdmacm need rdma-core and its provider plugins, which one
#   machine's checks (shared memory, cma, tcp) never use.
# - The Python package (issue 16) will join the bundle when it lands.
#
# Environment: ZRT_BUNDLE_BUILD (build folder, default build-gpu-bundle), CUDA_HOME (default
# /usr/local/cuda), ZRT_BUNDLE_ARCHS (default sm_90), ZRT_BUNDLE_MESON_ARGS (more meson setup
# arguments, e.g. -Dwerror=true), ZRT_BUNDLE_LIMIT_MIB (default 64).
# Exit status: 0 bundle made; 1 build failed; 2 a library was not found or the bundle is too big;
# 3 no CUDA toolkit with NCCL.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
BUILD=${ZRT_BUNDLE_BUILD:-$ROOT/build-gpu-bundle}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
ARCHS=${ZRT_BUNDLE_ARCHS:-sm_90}
LIMIT_MIB=${ZRT_BUNDLE_LIMIT_MIB:-64}
die() {  # STATUS MESSAGE
  echo "bundle: error: $2" >&2
  exit "$1"
}
[ "$OUT" != "$ROOT" ] || die 2 "OUT must not be the repository itself"
for tool in ldd patchelf strip nm; do
  command -v "$tool" >/dev/null || die 2 "$tool not found (scripts/install-deps.sh installs it)"
done
if [ ! -x "$CUDA_HOME/bin/nvcc" ] || [ ! -f "$CUDA_HOME/include/nccl.h" ]; then
  die 3 "no CUDA toolkit with NCCL under $CUDA_HOME (nvcc, nccl.h): set CUDA_HOME"
fi

# 1. Build only what the bundle holds.
if [ ! -f "$BUILD/build.ninja" ]; then
  # shellcheck disable=SC2086  # ZRT_BUNDLE_MESON_ARGS is a list of words
  meson setup "$BUILD" --buildtype release -Dcuda=enabled -Dnccl=enabled -Dbench=false \
    -Dcudatoolkit_dir="$CUDA_HOME" -Dnvcc_architectures="$ARCHS" ${ZRT_BUNDLE_MESON_ARGS:-} ||
    die 1 "meson setup failed"
fi
binaries=(tests/cuda/test_cuda_probe tests/cuda/test_cuda_device tests/cuda/test_cuda_api
          tests/cuda/test_cuda_multirank tests/cuda/test_cuda_partition tests/gpu/zrt-gpu-probe
          tools/zrt-bench/zrt-bench tools/zrt-run/zrt-run examples/train_lm/train_lm)
ninja -C "$BUILD" "${binaries[@]}" || die 1 "build failed"

# 2. Copy the binaries and libzrt; find their libraries in the build tree (where their RUNPATHs
# still point at libzrt and the toolkit).
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib/ucx" "$OUT/share"
for binary in "${binaries[@]}"; do cp "$BUILD/$binary" "$OUT/bin/"; done
ucx_modules=(/usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0)

# Names the loader resolves outside the bundle: the C library and its loader, the GPU driver,
# NCCL (see the header).
system_lib() {
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libutil.so.* | libresolv.so.* | libcuda.so* | libnvidia-*) return 0 ;;
  esac
  return 1
}
copied=" "
# Copies every library that ELF FILE loads (ldd lists the whole closure) into lib/.
copy_closure() {  # FILE
  local listing name path
  listing=$(ldd "$1") || die 2 "ldd $1 failed"
  if grep -q 'not found' <<<"$listing"; then
    die 2 "$1 loads libraries that were not found: $(grep 'not found' <<<"$listing" | tr -s ' \t' ' ')"
  fi
  while read -r name path; do
    system_lib "$name" && continue
    case $name in libnccl.so*) continue ;; esac
    [[ "$copied" == *" $name "* ]] && continue
    [ -f "$path" ] || die 2 "$1: $name resolves to $path, which is not a file"
    cp -L "$path" "$OUT/lib/$name"
    copied+="$name "
  done < <(sed -nE 's/^[[:space:]]*([^[:space:]]+) => ([^[:space:]]+) \(0x[0-9a-f]+\)$/\1 \2/p' \
             <<<"$listing")
}
for binary in "${binaries[@]}"; do copy_closure "$BUILD/$binary"; done
for module in "${ucx_modules[@]}"; do
  [ -f "$module" ] || die 2 "UCX module $module not found (libucx0)"
  cp -L "$module" "$OUT/lib/ucx/"
  copy_closure "$module"
done
# ldd lists each file's closure already; this pass only proves the copies need nothing more.
for lib in "$OUT"/lib/*.so*; do copy_closure "$lib"; done

# 3. Strip, then point every file at the bundle's lib/.
for file in "$OUT"/bin/* "$OUT"/lib/*.so* "$OUT"/lib/ucx/*.so*; do
  strip --strip-unneeded "$file"
done
for file in "$OUT"/bin/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$file"; done
for file in "$OUT"/lib/*.so*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$file"; done
for file in "$OUT"/lib/ucx/*.so*; do patchelf --force-rpath --set-rpath '$ORIGIN/..' "$file"; done

# 4. train_lm's corpus: enough text for its default context, far less than the 1 MB word list.
[ -f /usr/share/dict/words ] || die 2 "/usr/share/dict/words not found (wamerican)"
head -n 20000 /usr/share/dict/words >"$OUT/share/words"

# 5. The manifest, and the size.
nccl_header=$CUDA_HOME/include/nccl.h
{
  echo "zrt GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "nvcc: $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p'), device code: $ARCHS"
  echo "nccl built against: $(sed -nE 's/^#define NCCL_(MAJOR|MINOR|PATCH) ([0-9]+).*/\2/p' "$nccl_header" |
    paste -sd.) (not bundled: the GPU machine's own is used)"
  echo "nccl symbols used: $(nm -D --undefined-only "$OUT"/lib/libzrt.so* "$OUT"/bin/* 2>/dev/null |
    awk '$2 ~ /^nccl/ {print $2}' | sort -u | paste -sd' ')"
  echo "files:"
  (cd "$OUT" && find . -type f ! -name MANIFEST -printf '%s %P\n' | sort -k2)
} >"$OUT/MANIFEST"
# The limit holds for the bundle and the repository's files together: both travel.
bytes=$(du -sb "$OUT" | cut -f1)
tree=$(git -C "$ROOT" ls-files -z 2>/dev/null | (cd "$ROOT" && xargs -0 -r du -cb 2>/dev/null) |
  tail -n 1 | cut -f1) || tree=0
tree=${tree:-0}
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "bundle: $OUT: $(find "$OUT" -type f | wc -l) files, $(mib "$bytes") MiB ($bytes bytes);" \
  "with the repository's files $(mib $((bytes + tree))) MiB of the $LIMIT_MIB MiB that travel"
if [ $((bytes + tree)) -gt $((LIMIT_MIB * 1048576)) ]; then
  die 2 "the bundle and the repository are $(mib $((bytes + tree))) MiB, over $LIMIT_MIB MiB"
fi
