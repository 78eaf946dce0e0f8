#!/bin/bash
# bench_overlap's balanced device-like model, alternated round by round over an older build and
# this one's settings that change the footprint: the step backup (segment, the default, against
# full) and the gradient windows (two, the default, against one). Prints step / max(compute,
# comm) per stage. Usage: bench/overlap_ab.sh OLD_BENCH_OVERLAP [rounds] (from the repository
# root, after a build; OLD_BENCH_OVERLAP is another build's build/bench/bench_overlap).
set -euo pipefail
old=$1
rounds=${2:-3}
args=(16 1048576 20 2)
summary() {
  grep -E "^stage [23], 2 ranks" |
    sed -E 's/.*stage ([23]).*step \/ max\(compute, comm\) = ([0-9.]+).*/stage \1 \2/' |
    tr '\n' ' '
}
for round in $(seq 1 "$rounds"); do
  echo "round $round old:      $("$old" "${args[@]}" 2>&1 | summary)"
  echo "round $round segment:  $(build/bench/bench_overlap "${args[@]}" 2>&1 | summary)"
  echo "round $round full:     $(BENCH_OVERLAP_STEP_BACKUP=1 build/bench/bench_overlap "${args[@]}" 2>&1 | summary)"
  echo "round $round 1 window: $(BENCH_OVERLAP_GRAD_WINDOWS=1 build/bench/bench_overlap "${args[@]}" 2>&1 | summary)"
done
