#!/usr/bin/env bash
# The README's first command: installs what is missing, builds zrt, then runs the main job on
# this machine: a short ZeRO stage-3 training run of examples/train_lm on 2 local ranks, and a
# short collective bandwidth table. Idempotent: a second run reuses the build.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release
fi
ninja -C build

ranks=${ZRT_QUICKSTART_RANKS:-2}
echo
echo "== train_lm: ZeRO stage 3 on $ranks local ranks (build/tools/zrt-run/zrt-run -n $ranks ...)"
build/tools/zrt-run/zrt-run -n "$ranks" build/examples/train_lm/train_lm \
  --stage 3 --steps 200 --print-every 25

echo
echo "== zrt-bench: collective bandwidth on $ranks local ranks, host memory"
build/tools/zrt-run/zrt-run -n "$ranks" build/tools/zrt-bench/zrt-bench \
  reduce_scatter all_gather all_reduce -b 64K -e 64M -f 4 -n 10 -w 3 -c 1
