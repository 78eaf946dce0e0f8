#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, coverage in every library through
# -fsanitize=fuzzer-no-link) in BUILD_DIR (default build-fuzz) and runs each for SECONDS
# (default 20) from its committed seeds: build-fuzz.sh [BUILD_DIR] [SECONDS].
# Ends with "N passed, N failed" like scripts/test.sh; exit status 0 iff no target failed.
# A finding is left in BUILD_DIR/tests/fuzz/findings-fuzz_<target>/ (see regressions/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
build_dir=${1:-build-fuzz}
seconds=${2:-20}
targets="store_protocol partition_config model_profile manifest"

if [ ! -f "$build_dir/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build_dir" -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args=-fsanitize=fuzzer-no-link -Dc_args=-fsanitize=fuzzer-no-link \
    -Dbench=false -Dexamples=false -Dcuda=disabled -Dnccl=disabled \
    || { echo "0 passed, 1 failed"; exit 1; }
fi
ninja -C "$build_dir" $(for t in $targets; do echo "tests/fuzz/fuzz_$t"; done) \
  || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
# A UBSan report is a finding too: make it fatal so that libFuzzer keeps the input.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
for t in $targets; do
  if tests/fuzz/run-fuzzer.sh "$build_dir/tests/fuzz/fuzz_$t" \
      "$build_dir/tests/fuzz/corpus-$t" "tests/fuzz/corpus/$t" "$seconds"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
