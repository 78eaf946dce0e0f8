#!/usr/bin/env bash
# run-gpu-checks.sh [--budget SECONDS] BUNDLE LOGDIR — zrt's GPU checks, run from the bundle that
# tests/gpu/bundle.sh made: nothing is built here (the GPU machine has neither zrt's build
# dependencies nor UCX). See tests/gpu/README.md.
#
# Checks in this order, one summary line each (PASS, FAIL or SKIP, the name, a detail):
#   nccl          which libnccl.so.2 the bundle uses (the machine's own; bundle.sh says why)
#   bundle-libs   every file's libraries resolve from the bundle alone (plus that NCCL and the
#                 C library), with no undefined symbol or missing version (ldd -r), and every
#                 binary starts (--help or --gtest_list_tests)
#   gpu-probe     zrt-gpu-probe answers: a device, or the CUDA runtime's reason there is none
#   train-lm-host train_lm on host memory at N = 2 under zrt-run (UCX from the bundle)
#   cuda_probe, cuda_api                 the CUDA test binaries (gtest), cheap ones first [GPU]
#   bench-cuda    zrt-bench -m cuda, every collective, N = 1 under zrt-run, results checked [GPU]
#   cuda_device, cuda_partition, cuda_multirank                                          [GPU]
#   kernel-bw     the bundle's CUDA kernel bandwidth benchmarks (bin/bench_cuda_*)    [GPU]
# Without a usable CUDA device every [GPU] check is a SKIP carrying the runtime's reason; where
# the driver lists a GPU all the same (nvidia-smi, /dev/nvidia0), gpu-probe FAILs. Inside the
# gtests a skip for "no usable CUDA device" fails its check.
#
# ZRT_GPU_ONLY="cuda_device bench-cuda ..." runs only the named GPU and train-lm checks (the
# others SKIP as "not selected"), for a rerun of what failed; the bundle checks always run.
# The budget (default 480 s, or $ZRT_GPU_BUDGET_S) is shared: each step runs under `timeout`
# with the lesser of its own cap and what is left. Logs: LOGDIR/NAME.log, LOGDIR/summary.txt.
# The last line is "N passed, N failed, N skipped (T s)". Exit status: 0 nothing failed, 1 a
# check failed, 2 usage.
set -uo pipefail

BUDGET_S=${ZRT_GPU_BUDGET_S:-480}
if [ "${1:-}" = --budget ]; then
  BUDGET_S=${2:-}
  shift 2 || true
fi
if [ $# -ne 2 ] || ! [[ "$BUDGET_S" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [--budget SECONDS] BUNDLE LOGDIR" >&2
  exit 2
fi
BUNDLE=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: no bundle at $1" >&2; exit 2; }
mkdir -p "$2" || exit 2
LOGDIR=$(cd "$2" && pwd)
START=$(date +%s)
BIN=$BUNDLE/bin

results=()  # "STATUS|name|detail"
record() {  # STATUS NAME DETAIL
  results+=("$1|$2|$3")
  printf '%-4s %-14s %s\n' "$1" "$2" "$3"
}
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
finish() {
  local pass=0 fail=0 skip=0 line status name detail
  {
    echo
    echo "==== zrt GPU checks: $BUNDLE (logs in $LOGDIR) ===="
    for line in "${results[@]}"; do
      IFS='|' read -r status name detail <<<"$line"
      printf '%-4s %-14s %s\n' "$status" "$name" "$detail"
      case $status in PASS) pass=$((pass + 1)) ;; SKIP) skip=$((skip + 1)) ;; *) fail=$((fail + 1)) ;; esac
    done
    echo "$pass passed, $fail failed, $skip skipped ($(($(date +%s) - START)) s of $BUDGET_S)"
  } >"$LOGDIR/summary.txt"
  cat "$LOGDIR/summary.txt"
  [ "$fail" -eq 0 ]
  exit $?
}
# Runs "$@" for at most min(MAX_S, what is left), output in LOGDIR/NAME.log. Returns the
# command's status; 124 when it ran out of time or no time was left.
run_step() {  # NAME MAX_S command...
  local name=$1 max=$2 limit
  shift 2
  limit=$(left)
  [ "$limit" -gt "$max" ] && limit=$max
  if [ "$limit" -lt 5 ]; then
    echo "time budget spent before $name" >"$LOGDIR/$name.log"
    return 124
  fi
  echo "+ timeout ${limit}s $*" >"$LOGDIR/$name.log"
  timeout --kill-after=5 "$limit" "$@" >>"$LOGDIR/$name.log" 2>&1
}
# The first line of LOGDIR/NAME.log that matches PATTERN, else its last line: why it failed.
first_line() {  # NAME PATTERN
  local line
  line=$(grep -m1 -E "$2" "$LOGDIR/$1.log")
  [ -n "$line" ] || line=$(grep -v '^+ timeout' "$LOGDIR/$1.log" | tail -n 1)
  cut -c1-160 <<<"$line"
}

if [ ! -f "$BUNDLE/MANIFEST" ] || [ ! -x "$BIN/zrt-gpu-probe" ]; then
  record FAIL bundle "$BUNDLE is no bundle (no MANIFEST or bin/zrt-gpu-probe): run tests/gpu/bundle.sh"
  finish
fi
cp "$BUNDLE/MANIFEST" "$LOGDIR/MANIFEST"

# NCCL: the machine's own (bundle.sh: 218 MB do not travel). PyTorch's pip package first, then
# the toolkit's, then the loader's cache.
find_nccl() {
  local dir
  if [ -n "${ZRT_NCCL_LIB_DIR:-}" ]; then
    echo "$ZRT_NCCL_LIB_DIR"
    return
  fi
  if command -v python3 >/dev/null 2>&1; then
    dir=$(timeout 30 python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = list(sys.path)
try:
    roots += site.getsitepackages() + [site.getusersitepackages()]
except AttributeError:
    pass
for root in roots:
    for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", "libnccl.so.2"), recursive=True)):
        print(os.path.dirname(path))
        sys.exit(0)
EOF
    )
    if [ -n "$dir" ]; then
      echo "$dir"
      return
    fi
  fi
  for dir in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    if [ -f "$dir/libnccl.so.2" ]; then
      echo "$dir"
      return
    fi
  done
  ldconfig -p 2>/dev/null | sed -nE 's|^[[:space:]]*libnccl\.so\.2 .*=> (.*)/libnccl\.so\.2$|\1|p' | head -n 1
}
NCCL_DIR=$(find_nccl)
if [ -z "$NCCL_DIR" ] || [ ! -f "$NCCL_DIR/libnccl.so.2" ]; then
  record FAIL nccl "no libnccl.so.2 found (pip nvidia-nccl-cu13, the toolkit, ldconfig); set ZRT_NCCL_LIB_DIR"
  finish
fi
NCCL_DIR=$(cd "$NCCL_DIR" && pwd)
record PASS nccl "$NCCL_DIR/libnccl.so.2 ($(grep '^nccl built against' "$BUNDLE/MANIFEST" | cut -d' ' -f4) at build time)"

# The bundle's libraries come from its RPATHs; LD_LIBRARY_PATH holds NCCL alone.
export LD_LIBRARY_PATH=$NCCL_DIR
export UCX_MODULE_DIR=$BUNDLE/lib/ucx
unset LD_PRELOAD

# bundle-libs: resolution of every ELF file, then each binary starts.
check_libraries() {
  local file listing bad=0 checked=0 line
  for file in "$BIN"/* "$BUNDLE"/lib/*.so* "$BUNDLE"/lib/ucx/*.so*; do
    [ -f "$file" ] || continue
    checked=$((checked + 1))
    echo "== $file"
    # -r (relocate, report undefined symbols) where the file is a whole process's closure or
    # brings its own: a library alone can lean on one that loads it (libucm on libucs).
    case $file in
      "$BUNDLE"/lib/*.so*) listing=$(ldd "$file" 2>&1) ;;
      *) listing=$(ldd -r "$file" 2>&1) ;;
    esac
    echo "$listing"
    while IFS= read -r line; do
      case $line in
        *"not found"* | *"undefined symbol"* | *"not a dynamic"*) ;;
        *" => $BUNDLE/"* | *" => $NCCL_DIR/libnccl.so.2 "*) continue ;;
        *linux-vdso.so* | *ld-linux*.so* | *libc.so.* | *libm.so.* | *libdl.so.* | \
          *libpthread.so.* | *librt.so.* | *libutil.so.* | *libresolv.so.*) continue ;;
        *) [[ "$line" == *" => "* ]] || continue ;;
      esac
      echo "BAD: $file: $line"
      bad=$((bad + 1))
    done <<<"$listing"
  done
  echo "checked $checked files, $bad bad lines"
  [ "$bad" -eq 0 ]
}
starts() {
  local binary status
  for binary in "$BIN"/*; do
    case ${binary##*/} in
      test_*) "$binary" --gtest_list_tests >/dev/null ;;
      zrt-gpu-probe) "$binary" >/dev/null; [ $? -le 2 ] ;;
      *) "$binary" --help >/dev/null ;;
    esac
    status=$?
    echo "${binary##*/}: exit $status"
    [ $status -eq 0 ] || return 1
  done
}
files=$(find "$BUNDLE" -type f | wc -l)
size=$(du -sm "$BUNDLE" | cut -f1)
export BIN BUNDLE NCCL_DIR
export -f check_libraries starts
if ! run_step bundle-libs 60 bash -c check_libraries; then
  record FAIL bundle-libs "$(first_line bundle-libs '^BAD|time budget')"
elif ! run_step bundle-starts 60 bash -c starts; then
  record FAIL bundle-libs "a binary does not start: $(first_line bundle-starts 'exit [1-9]|time budget')"
else
  record PASS bundle-libs "$files files, $size MiB: libraries resolve from the bundle (+ NCCL), all $(find "$BIN" -type f | wc -l) binaries start"
fi

# gpu-probe, and whether the driver sees a GPU at all.
driver_gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L >"$LOGDIR/nvidia-smi.log" 2>&1
  driver_gpus=$(grep -c '^GPU ' "$LOGDIR/nvidia-smi.log")
  nvidia-smi >>"$LOGDIR/nvidia-smi.log" 2>&1
elif [ -e /dev/nvidia0 ]; then
  driver_gpus=1
fi
run_step gpu-probe 30 "$BIN/zrt-gpu-probe"
probe=$?
reason=$(sed -n 's/^cuda: //p' "$LOGDIR/gpu-probe.log" | head -n 1)
nccl_loaded=$(sed -n 's/^nccl: //p' "$LOGDIR/gpu-probe.log" | head -n 1)
gpu=0
if [ $probe -eq 0 ]; then
  gpu=1
  record PASS gpu-probe "$reason; NCCL $nccl_loaded loaded"
elif [ $probe -eq 2 ] && [ "$driver_gpus" -eq 0 ]; then
  record SKIP gpu-probe "no GPU here: $reason (NCCL $nccl_loaded loaded)"
elif [ $probe -eq 2 ]; then
  record FAIL gpu-probe "the driver lists $driver_gpus GPU(s) but: $reason"
else
  record FAIL gpu-probe "exit $probe: $(first_line gpu-probe . )"
fi
gpu_skip() { record SKIP "$1" "${reason:-no usable CUDA device}"; }
# Whether check NAME is to run (ZRT_GPU_ONLY); records its SKIP when not.
selected() {  # NAME
  if [ -z "${ZRT_GPU_ONLY:-}" ] || [[ " $ZRT_GPU_ONLY " == *" $1 "* ]]; then return 0; fi
  record SKIP "$1" "not selected (ZRT_GPU_ONLY)"
  return 1
}

# train_lm on host memory, two ranks: the bundle's UCX, OpenBLAS and libzrt doing real work.
if ! selected train-lm-host; then
  :
elif run_step train-lm-host 90 "$BIN/zrt-run" -n 2 --timeout 85 "$BIN/train_lm" --steps 6 \
  --batch 16 --print-every 2 --corpus "$BUNDLE/share/words"; status=$?; [ $status -eq 0 ]; then
  record PASS train-lm-host "N=2 stage 3, 6 steps: $(grep -iE 'loss' "$LOGDIR/train-lm-host.log" | tail -n 1 | cut -c1-100)"
else
  record FAIL train-lm-host "exit $status: $(first_line train-lm-host 'train_lm:|rror|time budget')"
fi

# The CUDA tests.
run_gtest() {  # NAME MAX_S
  local name=$1 binary=$BIN/test_$1 status passed failed skipped
  selected "$name" || return
  if [ "$gpu" -eq 0 ]; then
    gpu_skip "$name"
    return
  fi
  run_step "$name" "$2" "$binary" --gtest_output="xml:$LOGDIR/$name.xml"
  status=$?
  passed=$(grep -c '^\[       OK \]' "$LOGDIR/$name.log")
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$LOGDIR/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$LOGDIR/$name.log")
  if grep -q 'no usable CUDA device' "$LOGDIR/$name.log"; then
    record FAIL "$name" "a test found no usable CUDA device: $(first_line "$name" 'no usable CUDA device')"
  elif [ $status -eq 124 ] || [ $status -eq 137 ]; then
    record FAIL "$name" "timed out ($passed ok, $failed failed, $skipped skipped so far)"
  elif [ $status -ne 0 ]; then
    record FAIL "$name" "exit $status ($passed ok, $failed failed, $skipped skipped): $(first_line "$name" '^\[  FAILED  \] [A-Za-z]')"
  else
    record PASS "$name" "$passed ok, $skipped skipped"
  fi
}
# Cheap and broad first, so that a short budget still covers the most.
run_gtest cuda_probe 60
run_gtest cuda_api 60

# zrt-bench on device memory: one rank (NCCL puts no two ranks on one GPU), every collective,
# results checked (exit 3 and "FAILED" when an element is wrong).
if ! selected bench-cuda; then
  :
elif [ "$gpu" -eq 0 ]; then
  gpu_skip bench-cuda
else
  run_step bench-cuda 90 "$BIN/zrt-run" -n 1 --timeout 85 \
    "$BIN/zrt-bench" all -m cuda -b 8 -e 256M -f 4 -n 10 -w 3 -c 1
  status=$?
  if [ $status -eq 0 ]; then
    record PASS bench-cuda "N=1, every collective 8 B..256 MiB, results checked: see bench-cuda.log"
  else
    record FAIL bench-cuda "exit $status: $(first_line bench-cuda 'FAILED|zrt-bench:|rror|time budget')"
  fi
fi

run_gtest cuda_device 150
run_gtest cuda_partition 120
run_gtest cuda_multirank 120

# CUDA kernel bandwidth benchmarks, when the bundle has any.
kernel_benches=("$BIN"/bench_cuda_*)
if ! selected kernel-bw; then
  :
elif [ ! -x "${kernel_benches[0]}" ]; then
  record SKIP kernel-bw "no CUDA kernel benchmark in this bundle (bin/bench_cuda_*)"
elif [ "$gpu" -eq 0 ]; then
  gpu_skip kernel-bw
else
  for bench in "${kernel_benches[@]}"; do
    name=kernel-bw-${bench##*/bench_cuda_}
    run_step "$name" 90 "$bench"
    status=$?
    if [ $status -eq 0 ]; then
      record PASS "$name" "see $name.log"
    else
      record FAIL "$name" "exit $status: $(first_line "$name" 'rror|FAIL|time budget')"
    fi
  done
fi

finish
