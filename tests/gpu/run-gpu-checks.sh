#!/usr/bin/env bash
# run-gpu-checks.sh LOGDIR — zrt's GPU checks, for a machine with NVIDIA GPUs.
#
# Builds zrt in its own folder (build-gpu-checks, or $ZRT_GPU_BUILD) with CUDA and NCCL enabled,
# runs the CUDA test suites (kernels vs the host kernels, a one-rank NCCL communicator, streams,
# events and every collective through the C API on one rank per GPU), then a bandwidth sweep
# (zrt-bench -m cuda under zrt-run, one rank per GPU). Prints a summary; every step's output is
# in LOGDIR. Finishes in under 5 minutes (each step has a timeout from a shared budget).
#
# Needs: nvidia-smi (the driver), the CUDA toolkit ($CUDA_HOME, default /usr/local/cuda: nvcc,
# cudart), NCCL (under $CUDA_HOME or the system paths), meson, ninja, a C++20 compiler, and
# zrt's other build dependencies (fmt, UCX, GoogleTest, CLI11, nlohmann-json: see
# scripts/install-deps.sh). Missing pieces are named and the script stops with status 3.
# Exit status: 0 all checks passed, 1 a check failed, 2 no GPU found, 3 missing tools/deps.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 LOGDIR" >&2
  exit 3
fi
mkdir -p "$1" || exit 3
LOGDIR=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.." || exit 3
BUILD=${ZRT_GPU_BUILD:-build-gpu-checks}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BUDGET_S=${ZRT_GPU_BUDGET_S:-290}
START=$(date +%s)
JOBS=$(nproc 2>/dev/null || echo 4)

results=()  # "STATUS name detail"
record() { results+=("$1|$2|$3"); printf '%-5s %-26s %s\n' "$1" "$2" "$3"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
print_summary() {
  local pass=0 fail=0 skip=0
  echo
  echo "==== zrt GPU checks: summary (logs in $LOGDIR) ===="
  for line in "${results[@]}"; do
    IFS='|' read -r status name detail <<<"$line"
    printf '%-5s %-26s %s\n' "$status" "$name" "$detail"
    case $status in PASS) pass=$((pass + 1)) ;; SKIP) skip=$((skip + 1)) ;; *) fail=$((fail + 1)) ;; esac
  done
  echo "$pass passed, $fail failed, $skip skipped ($(( $(date +%s) - START )) s)"
}
summary() { print_summary | tee "$LOGDIR/summary.txt"; }
# Runs "$@" with what is left of the budget (at most $1 seconds), output to LOGDIR/NAME.log.
run_step() {  # NAME MAX_S command...
  local name=$1 max=$2 limit
  shift 2
  limit=$(left)
  [ "$limit" -gt "$max" ] && limit=$max
  if [ "$limit" -le 5 ]; then
    echo "time budget spent before $name" >"$LOGDIR/$name.log"
    return 124
  fi
  timeout --kill-after=10 "$limit" "$@" >"$LOGDIR/$name.log" 2>&1
}

# 1. GPUs. nvidia-smi is the driver's own view; without it (or with no GPU listed) nothing
# below can run.
GPUS=0
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L >"$LOGDIR/gpus.log" 2>&1
  GPUS=$(grep -c '^GPU ' "$LOGDIR/gpus.log" || true)
  nvidia-smi >>"$LOGDIR/gpus.log" 2>&1 || true
else
  echo "nvidia-smi not found in PATH" >"$LOGDIR/gpus.log"
fi
# ZRT_GPU_CHECKS_SELFTEST=1 goes on without a GPU, to test this script itself: the device
# checks must then fail, naming the CUDA runtime's reason.
if [ "$GPUS" -lt 1 ] && [ "${ZRT_GPU_CHECKS_SELFTEST:-0}" = 1 ]; then
  record FAIL gpus "no NVIDIA GPU found; ZRT_GPU_CHECKS_SELFTEST=1: going on"
  GPUS=1
elif [ "$GPUS" -lt 1 ]; then
  record FAIL gpus "no NVIDIA GPU found ($(head -n 1 "$LOGDIR/gpus.log"))"
  summary
  exit 2
else
  record PASS gpus "$GPUS GPU(s): $(grep '^GPU 0' "$LOGDIR/gpus.log" | cut -c1-60)"
fi

# 2. Tools and dependencies, all named at once when missing.
missing=()
[ -x "$CUDA_HOME/bin/nvcc" ] || missing+=("nvcc ($CUDA_HOME/bin/nvcc; set CUDA_HOME)")
[ -f "$CUDA_HOME/include/cuda_runtime.h" ] || missing+=("cuda_runtime.h ($CUDA_HOME/include)")
for tool in meson ninja c++ pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ! -f "$CUDA_HOME/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  missing+=("nccl.h (NCCL headers under $CUDA_HOME/include or /usr/include)")
fi
if command -v pkg-config >/dev/null 2>&1; then
  for pc in fmt ucx gtest; do
    pkg-config --exists "$pc" 2>/dev/null || missing+=("$pc (pkg-config $pc)")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  record FAIL prerequisites "missing: ${missing[*]}; see scripts/install-deps.sh"
  summary
  exit 3
fi
record PASS prerequisites "nvcc $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# 3. Configure and build only what the checks run.
configure_args=(-Dcudatoolkit_dir="$CUDA_HOME" -Dcuda=enabled -Dnccl=enabled -Dbench=false
                -Dexamples=false)
if [ -f "$BUILD/build.ninja" ]; then
  run_step configure 120 meson configure "$BUILD" "${configure_args[@]}"
else
  run_step configure 120 meson setup "$BUILD" "${configure_args[@]}"
fi
configured=$?
if [ $configured -ne 0 ]; then
  record FAIL configure "meson failed: $(grep -m1 -i 'error' "$LOGDIR/configure.log")"
  summary
  exit 1
fi
record PASS configure "$BUILD"
targets=()
for t in tests/cuda/test_cuda_probe tests/cuda/test_cuda_device tests/cuda/test_cuda_api \
         tests/cuda/test_cuda_multirank tests/cuda/test_cuda_partition tools/zrt-run/zrt-run \
         tools/zrt-bench/zrt-bench; do
  if ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q "^$t:"; then targets+=("$t"); fi
done
run_step build 200 ninja -C "$BUILD" -j "$JOBS" "${targets[@]}"
built=$?
if [ $built -eq 124 ] || [ $built -eq 137 ]; then
  record FAIL build "timed out (time budget); $(tail -n 1 "$LOGDIR/build.log")"
  summary
  exit 1
elif [ $built -ne 0 ]; then
  record FAIL build "$(grep -m1 -E 'error|FAILED' "$LOGDIR/build.log")"
  summary
  exit 1
fi
record PASS build "${#targets[@]} targets"

# 4. Test suites. On a GPU machine a skip for "no usable CUDA device" is a failure: the driver
# lists GPUs but the CUDA runtime cannot use them.
run_gtest() {  # NAME BINARY MAX_S
  local name=$1 binary=$BUILD/$2 max=$3
  if [ ! -x "$binary" ]; then
    record FAIL "$name" "$2 was not built"
    return
  fi
  run_step "$name" "$max" "$binary" --gtest_output="xml:$LOGDIR/$name.xml"
  local status=$? passed failed skipped
  passed=$(grep -c '^\[       OK \]' "$LOGDIR/$name.log")
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$LOGDIR/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$LOGDIR/$name.log")
  if grep -q 'no usable CUDA device' "$LOGDIR/$name.log"; then
    record FAIL "$name" "CUDA unusable despite $GPUS GPU(s): $(grep -m1 'no usable CUDA device' "$LOGDIR/$name.log")"
  elif [ $status -eq 124 ] || [ $status -eq 137 ]; then
    record FAIL "$name" "timed out ($passed ok, $failed failed, $skipped skipped so far)"
  elif [ $status -ne 0 ]; then
    record FAIL "$name" "exit $status ($passed ok, $failed failed, $skipped skipped)"
  else
    record PASS "$name" "$passed ok, $skipped skipped"
  fi
}
run_gtest cuda_probe tests/cuda/test_cuda_probe 60
run_gtest cuda_device tests/cuda/test_cuda_device 120
run_gtest cuda_api tests/cuda/test_cuda_api 60
run_gtest cuda_multirank tests/cuda/test_cuda_multirank 180
run_gtest cuda_partition tests/cuda/test_cuda_partition 120

# 5. Bandwidth sweep: one rank per GPU (NCCL refuses two ranks on one device).
if [ -x "$BUILD/tools/zrt-bench/zrt-bench" ] && [ -x "$BUILD/tools/zrt-run/zrt-run" ]; then
  if run_step bandwidth 120 "$BUILD/tools/zrt-run/zrt-run" -n "$GPUS" --timeout 110 \
      "$BUILD/tools/zrt-bench/zrt-bench" all -m cuda -b 1M -e 256M -f 4 -n 10 -w 3 -c 1; then
    record PASS bandwidth "zrt-bench -m cuda, $GPUS rank(s): see bandwidth.log"
    grep -E '^[[:space:]]*[0-9]' "$LOGDIR/bandwidth.log" | tail -n 20 || true
  else
    record FAIL bandwidth "zrt-bench -m cuda failed: $(grep -m1 . "$LOGDIR/bandwidth.log")"
  fi
else
  record SKIP bandwidth "zrt-bench or zrt-run not built in this tree"
fi

summary
for line in "${results[@]}"; do
  case $line in FAIL*) exit 1 ;; esac
done
exit 0
