#!/bin/sh
# The long kill matrix (tests/hardening/test_kill_matrix.cc): every case REPS times (default
# 50), then a table of cases x outcomes counted over survivors, and per case how many
# repetitions killed the victim inside the collective (the test fails a case
# where fewer than half did):
#   named      the survivor's collective failed with an error naming the dead rank
#   completed  the survivor's part was done before the kill (success is correct then)
#   other      an error that does not name the dead rank (a test failure)
#   crash/hang the survivor died of a signal or outlived the harness deadline (a test failure)
# Usage: scripts/kill_matrix.sh [build-dir] [reps] [gtest-filter]; ZRT_TEST_KILL_COUNT=<elements>
# sets the message size (default 1 Mi f32).
set -eu
build=${1:-build}
reps=${2:-50}
filter=${3:-*}
log=$(mktemp /tmp/zrt_kill_matrix.XXXXXX)
status=0
ZRT_TEST_KILL_REPS=$reps "$build/tests/hardening/test_kill_matrix" --gtest_filter="Hardening/KillMatrix.*$filter" \
  >"$log" 2>&1 || status=$?
grep '^KILL ' "$log" | awk '
  { split($2, c, "="); split($7, o, "="); n[c[2]]++; k[c[2] " " o[2]]++; seen[o[2]] = 1
    if (!(c[2] in order)) { order[c[2]] = ++cases; name[cases] = c[2] } }
  END {
    split("named completed other crash hang", cols, " ")
    printf "%-28s %9s", "case", "survivors"
    for (i = 1; i <= 5; i++) printf " %9s", cols[i]
    printf "\n"
    for (j = 1; j <= cases; j++) {
      cs = name[j]; printf "%-28s %9d", cs, n[cs]
      for (i = 1; i <= 5; i++) printf " %9d", k[cs " " cols[i]]
      printf "\n"
      for (i = 1; i <= 5; i++) total[i] += k[cs " " cols[i]]
      all += n[cs]
    }
    printf "%-28s %9d", "total", all
    for (i = 1; i <= 5; i++) printf " %9d", total[i]
    printf "\n"
  }'
grep 'repetitions killed the victim mid-collective' "$log" || true
grep -E '^\[  FAILED  \]' "$log" | sort -u || true
echo "# log: $log (test exit status $status)"
exit "$status"
