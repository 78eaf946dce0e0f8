#!/usr/bin/env bash
# Builds zrt (if needed) and runs the whole test suite: unit, multi-rank, end-to-end, tools.
# Usage: scripts/test.sh [BUILD_DIR] [extra `meson test` arguments...]
# Ends with the line "N passed, N failed, N skipped" (CI reads it); exit status 0 iff none failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true

if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" ${ZRT_MESON_ARGS:-} || exit 1
fi
ninja -C "$build_dir" || { echo "0 passed, 1 failed"; exit 1; }

# The soak suite runs minutes; it has its own command (scripts/test.sh BUILD --suite soak).
meson test -C "$build_dir" --no-rebuild --print-errorlogs --no-suite soak "$@"
status=$?

python3 scripts/count_results.py "$build_dir/meson-logs/testlog.json"
exit $status
