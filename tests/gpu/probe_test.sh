#!/usr/bin/env bash
# probe_test.sh PROBE: zrt-gpu-probe either finds a device (exit 0, "cuda: N device(s)") or says
# why there is none (exit 2, the CUDA runtime's reason or "built without"); anything else fails.
set -uo pipefail
output=$("$1")
status=$?
echo "$output"
case $status in
  0) grep -qE '^cuda: [1-9][0-9]* device\(s\)$' <<<"$output" ;;
  2) grep -qE '^cuda: ZRT_UNSUPPORTED: .*(no usable CUDA device|built without)' <<<"$output" ;;
  *) echo "unexpected exit status $status" >&2; exit 1 ;;
esac
