#!/usr/bin/env bash
# Sanitizer builds and live fuzzing, as CI runs them after the release build. Sourced by .ci/run
# (which provides add_result and the totals); ZRT_CI_SANITIZERS=0 .ci/run skips them.
#
#   asan-ubsan  the unit and multi-rank suites under AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan        the tests that drive zrt's threads (below) under ThreadSanitizer
#   fuzz        every libFuzzer target for 20 s from its committed seeds (tests/fuzz/)
#
# Zero reports: every report fails its test. ASan and UBSan abort the process (abort_on_error),
# TSan exits it with code 66 at the first report (halt_on_error), so a report inside a forked
# rank fails that rank and its multi-rank test. LeakSanitizer checks each test process at exit;
# forked ranks leave with _exit and are not leak-checked. The only suppressions are the narrow,
# explained entries in tests/sanitizers/. No benchmarks or examples, and the TSan build compiles
# only what its tests need, to stay in CI's time on 2 cores.
# -O1 and line tables only (-g1: functions and lines, what reports and suppressions name), not
# debugoptimized's -O2 -g: compiling was most of the ASan run's 44 minutes in CI, and
# progress_engine.cc under ASan+UBSan took 53 s at -O2 -g, 24 s at -O1 -g1.
sanitizer_args="-Doptimization=1 -Ddebug=false -Dc_args=-g1 -Dcpp_args=-g1
  -Dbench=false -Dexamples=false -Dcuda=disabled -Dnccl=disabled -Db_lundef=false"
supp="$PWD/tests/sanitizers"

# san_suite NAME BUILD_DIR MESON_ARGS TEST_ENV TESTS [MESON_TEST_ARGS...]
# Configures BUILD_DIR afresh, builds what TESTS need (everything for "all"), runs them with
# the environment TEST_ENV (NAME=VALUE words) and MESON_TEST_ARGS, and adds the
# "N passed, N failed" line to the totals.
san_suite() {
  local name=$1 dir=$2 args=$3 test_env=$4 tests=$5
  shift 5
  local log="/tmp/zrt-ci-$name.log" selected=""
  [ "$tests" = all ] || selected=$tests
  echo "=== $name ($dir: $args)"
  rm -rf "$dir"
  {
    if ! meson setup "$dir" $args >/dev/null; then
      echo "meson setup failed"
      echo "0 passed, 1 failed"
    elif ! ninja -C "$dir" $(san_targets "$dir" "$selected"); then
      echo "0 passed, 1 failed"
    else
      # The timeouts in meson.build and the multi-rank harness's deadlines are sized for the
      # release build; sanitizers run several times slower (and forked ranks share 2 cores).
      env $test_env ZRT_TEST_DEADLINE_SCALE=4 meson test -C "$dir" --no-rebuild --print-errorlogs --timeout-multiplier 4 \
        "$@" $selected
      san_count "$dir/meson-logs/testlog.json"
    fi
  } 2>&1 | tee "$log"
  add_result "$name" "$log"
}

# san_targets BUILD_DIR TESTS: the files (ninja targets) that the named tests run or depend on;
# nothing, which builds everything, when TESTS is empty.
san_targets() {
  [ -n "$2" ] || return 0
  meson introspect "$1" --tests --targets | python3 -c '
import json, os, sys
info = json.load(sys.stdin)
build = os.path.realpath(sys.argv[1])
wanted = set(sys.argv[2].split())
files = {target["id"]: target["filename"] for target in info["targets"]}
found, out = set(), set()
for test in info["tests"]:
    if test["name"] not in wanted:
        continue
    found.add(test["name"])
    paths = [test["cmd"][0]] + [f for dep in test["depends"] for f in files.get(dep, [])]
    for path in map(os.path.realpath, paths):
        if path.startswith(build + os.sep):
            out.add(os.path.relpath(path, build))
missing = wanted - found
if missing:
    sys.exit("no such test: " + " ".join(sorted(missing)))
print(" ".join(sorted(out)))
' "$1" "$2"
}

# san_count TESTLOG: "N passed, N failed, N skipped" from meson's log, as scripts/test.sh counts.
san_count() {
  python3 scripts/count_results.py "$1"
}

asan_env="ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1
  LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
  UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
# hwloc loads libpciaccess through its pci plugin and unloads both when the topology is
# destroyed; libpciaccess's device list, still held by its own global, then becomes unreachable
# and LeakSanitizer reports it with "<unknown module>" frames that no suppression can name
# (1016 bytes per topology: test_binding, test_topo_cli, test_bench_multirank). Preloading the
# library keeps it, its global and so the list, for the life of the process. ASan then no
# longer comes first in the library list, which it refuses unless told (verify_asan_link_order):
# libpciaccess defines none of the functions ASan intercepts.
pciaccess=/usr/lib/x86_64-linux-gnu/libpciaccess.so.0
if [ -e "$pciaccess" ]; then
  asan_env="${asan_env/detect_leaks=1:/detect_leaks=1:verify_asan_link_order=0:} LD_PRELOAD=$pciaccess"
fi
san_suite asan-ubsan build-asan "-Db_sanitize=address,undefined $sanitizer_args" "$asan_env" all \
  --suite unit --suite multirank

# TSan: the tests that run zrt's progress thread beside the caller's (engine, communicator,
# transport, collectives (the cma all-gather maps peers' memory from the submitting thread), the
# order checker, the partition manager's overlap streams, its
# rollback and the offloaded optimizer's thread during backward, the hardening tests that fail
# and abort communicators mid-collective) and the rendezvous store server's threads (bootstrap).
# The exhaustive matrices (collectives_matrix, the tools' and checkpoint's multi-rank runs) add
# minutes, not new thread interactions, so they are left to the ASan run.
#
# UCX_MEM_MMAP_HOOK_MODE=none: UCX's memory hooks patch glibc's mmap/munmap/madvise in place
# ("bistro" mode). glibc calls madvise on a thread's stack as the thread exits, after TSan has
# torn down that thread's state; the hook takes a pthread rwlock, TSan's interceptor uses the
# dead state and every rank crashed with SIGSEGV (ucm_madvise -> ucm_event_enter ->
# pthread_rwlock_rdlock) before any report. The hooks only keep UCX's registration cache in
# step with unmapped memory, which the shared-memory and tcp transports used here do not need.
san_suite tsan build-tsan "-Db_sanitize=thread $sanitizer_args" \
  "UCX_MEM_MMAP_HOOK_MODE=none
   TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$supp/tsan.supp" \
  "engine comm_unit comm_multirank collectives_behaviour one_shot cma_all_gather c_api_collectives ucx_p2p checker
   test_partition_multirank test_partition_rollback test_partition_offload bootstrap_unit
   bootstrap_multirank api_common
   dead_peers abort_release api_misuse api_misuse_unit"

# Fuzzing: every libFuzzer target for a bounded 20 s from its committed seeds (clang build).
echo "=== fuzz (build-fuzz)"
rm -rf build-fuzz
tests/fuzz/build-fuzz.sh build-fuzz 20 2>&1 | tee /tmp/zrt-ci-fuzz.log
add_result fuzz /tmp/zrt-ci-fuzz.log
