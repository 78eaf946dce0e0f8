#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: run-fuzzer.sh FUZZER SCRATCH_CORPUS SEEDS SECONDS.
# New interesting inputs go to SCRATCH_CORPUS (never into the committed seeds); a crashing input
# is written next to it as crash-*/timeout-*/oom-* and the run fails. The last line repeats
# libFuzzer's executions per second for the CI log.
set -uo pipefail
fuzzer=$1 scratch=$2 seeds=$3 seconds=$4
mkdir -p "$scratch"
artifacts="$(dirname "$scratch")/findings-$(basename "$fuzzer")/"
mkdir -p "$artifacts"
log="$scratch.log"
# -timeout: an input that takes 10 s is a hang; -rss_limit_mb: parsers must not balloon.
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$artifacts" "$scratch" "$seeds" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
runs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}')
echo "$(basename "$fuzzer"): ${runs:-?} executions, ${rate:-?} exec/s, exit $status"
ls "$artifacts" 2>/dev/null | sed 's/^/finding: /'
exit "$status"
