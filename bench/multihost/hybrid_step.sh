#!/usr/bin/env bash
# Hybrid against flat sharding across simulated hosts (scripts/netns.sh): train_lm on 2 hosts x
# 2 ranks, each host's link shaped to RATE, stage S with flat sharding (--shard-group 4) and
# with hybrid sharding (--shard-group -1: one host's two ranks), and at stage 3 also flat with
# hpZ's secondary copy in each host (--hpz -1), the runs interleaved ROUNDS times in the same
# minutes. Prints each run's seconds per step and its traffic split, and the ratios of the
# medians (hybrid / flat, hpZ / flat; below 1 = faster than flat). Needs root.
#
#   bench/multihost/hybrid_step.sh BUILD_DIR [STAGE=2] [RATE=1gbit] [STEPS=10] [ROUNDS=3]
set -euo pipefail
build=${1:?usage: hybrid_step.sh BUILD_DIR [STAGE] [RATE] [STEPS] [ROUNDS]}
stage=${2:-2}
rate=${3:-1gbit}
steps=${4:-10}
rounds=${5:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
netns="$here/scripts/netns.sh"
train_lm=$(cd "$build" && pwd)/examples/train_lm/train_lm
"$netns" check
name="hb$(( $$ % 100000 ))"
out=$(mktemp -d "$(cd "$build" && pwd)/hybrid_step.XXXXXX")  # each host has its own /tmp
trap '"$netns" down "$name" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$netns" up "$name" 2
"$netns" shape "$name" 0 "$rate"
"$netns" shape "$name" 1 "$rate"
master=$("$netns" addr "$name" 0)
port=$(( 21000 + $$ % 11000 ))  # below the ephemeral range (32768-), where UCX tcp binds

# One run: prints "SECONDS_PER_STEP" on stdout; rank 0's output is kept in $out/$1.log.
run() {  # TAG GROUP [MORE TRAIN_LM ARGS...]
  local tag=$1 group=$2 pids=() host
  shift 2
  local more=("$@")
  port=$((port + 1))
  # One exec per host (one machine): its two ranks share its PID and IPC namespaces.
  for host in 0 1; do
    "$netns" exec "$name" "$host" bash -c '
      for local in 0 1; do
        RANK=$(('"$host"' * 2 + local)) WORLD_SIZE=4 LOCAL_RANK=$local LOCAL_WORLD_SIZE=2 \
          "$@" >"'"$out/$tag"'.$(('"$host"' * 2 + local)).log" 2>&1 &
      done
      fail=0; for p in $(jobs -p); do wait $p || fail=1; done; exit $fail' _ \
      env MASTER_ADDR="$master" MASTER_PORT="$port" ZRT_JOB_TOKEN="bench-$name-$port" \
      "$train_lm" --stage "$stage" --steps "$steps" --shard-group "$group" \
      --print-every "$steps" "${more[@]}" &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  if [ "$failed" -ne 0 ]; then cat "$out/$tag".*.log >&2; echo "run $tag failed" >&2; exit 1; fi
  # "stage S, 4 ranks, f32, P parameters: loss A -> B in K steps, T s"
  sed -n 's/.* in \([0-9]*\) steps, \([0-9.]*\) s.*/\2 \1/p' "$out/$tag.0.log" |
    awk '{ printf "%.4f\n", $1 / $2 }'
}

echo "# train_lm stage $stage, 2 hosts x 2 ranks, links shaped to $rate, $steps steps, $rounds rounds"
flat=() hybrid=() hpz=()
for round in $(seq 1 "$rounds"); do
  f=$(run "flat$round" 4)
  h=$(run "hybrid$round" -1)
  flat+=("$f") hybrid+=("$h")
  line="round $round: flat $f s/step, hybrid $h s/step"
  if [ "$stage" -eq 3 ]; then
    z=$(run "hpz$round" 4 --hpz -1)
    hpz+=("$z")
    line+=", hpZ $z s/step"
  fi
  echo "$line"
done
echo "flat traffic (rank 0):";   grep "sent .* per step" "$out/flat1.0.log" | head -1
echo "hybrid traffic (rank 0):"; grep -E "sent .* per step|hybrid sharding" "$out/hybrid1.0.log" | head -2
if [ "$stage" -eq 3 ]; then
  echo "hpZ traffic (rank 0):";  grep -E "sent .* per step|hpZ" "$out/hpz1.0.log" | head -2
fi
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mf=$(median "${flat[@]}")
mh=$(median "${hybrid[@]}")
awk -v f="$mf" -v h="$mh" 'BEGIN { printf "median flat %.4f s/step, hybrid %.4f s/step: hybrid/flat = %.3f\n", f, h, h / f }'
if [ "$stage" -eq 3 ]; then
  mz=$(median "${hpz[@]}")
  awk -v f="$mf" -v z="$mz" 'BEGIN { printf "median hpZ %.4f s/step: hpZ/flat = %.3f\n", z, z / f }'
fi
