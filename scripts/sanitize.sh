#!/usr/bin/env bash
# Sanitizer builds and live fuzzing, as CI runs them when ZRT_CI_SANITIZERS=1. Sourced by
# .ci/run (which provides run_suite and add_result); run by hand as
#   ZRT_CI_SANITIZERS=1 .ci/run
# Sanitizers: the unit and multi-rank suites under ASan + UBSan; the threaded tests (engine,
# communicator, transport, collectives, hardening: each runs a progress thread beside the
# caller's) under TSan, by name (the exhaustive matrices add time, not threads). Zero reports:
# every report fails its test (halt_on_error / exitcode); the only suppressions are the narrow,
# explained UCX entries in tests/sanitizers/. No benchmarks or examples, to stay in CI's time.
sanitizer_args="-Dbench=false -Dexamples=false -Dcuda=disabled -Dnccl=disabled -Db_lundef=false"
supp="$PWD/tests/sanitizers"
ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1" \
LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0" \
UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp" \
  run_suite asan-ubsan build-asan "-Db_sanitize=address,undefined $sanitizer_args" \
  --suite unit --suite multirank
TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$supp/tsan.supp" \
  run_suite tsan build-tsan "-Db_sanitize=thread $sanitizer_args" \
  engine comm_unit comm_multirank collectives_behaviour ucx_p2p dead_peers abort_release \
  api_misuse api_misuse_unit

# Fuzzing: every libFuzzer target for a bounded 20 s from its committed seeds (clang build).
echo "=== fuzz (build-fuzz)"
rm -rf build-fuzz
tests/fuzz/build-fuzz.sh build-fuzz 20 2>&1 | tee /tmp/zrt-ci-fuzz.log
add_result fuzz /tmp/zrt-ci-fuzz.log

