#!/usr/bin/env python3
"""Prints "N passed, N failed, N skipped" from a meson testlog.json (the line CI adds up).

Expected failures count as passed; anything that is neither OK, EXPECTEDFAIL nor SKIP
(FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS) counts as failed. Each failed test is named first on a
line "FAILED: NAME (RESULT after N s)", because CI keeps only the tail of its log and the
count alone does not say which test to look at; its output's error lines (a unittest's "FAIL:"
and "AssertionError", gtest's "Failure") and last lines follow, each behind "FAILED: | ", so
that a flaky failure seen once in CI says why, not only where. Used by
scripts/test.sh and scripts/sanitize.sh.

A GoogleTest binary whose cases skip (no GPU, a kernel that forbids something) still exits 0 and
counts as passed here, one line per Meson test; the cases it skipped are listed on a line of
their own, "SKIPPED CASES: N in TEST (CASE, ...)", so that no skip passes unseen.
"""
import json
import re
import sys

TAIL_LINES = 12  # of a failed test's output, each cut to TAIL_WIDTH characters
TAIL_WIDTH = 240
ERROR_LINES = 8  # the first lines that say what failed, before the tail
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] (\w[\w/]*\.\w[\w/]*)")
ERROR = re.compile(r"^(FAIL|ERROR): |^\w*(Error|Exception)\b|Failure$|\bFAILED\b|Expected")


def why(test):
    """The lines of a failed test's output that say why: the first error lines, then the tail."""
    lines = ((test.get("stdout") or "") + (test.get("stderr") or "")).rstrip().splitlines()
    errors = [i for i, line in enumerate(lines) if ERROR.search(line)][:ERROR_LINES]
    tail = range(max(0, len(lines) - TAIL_LINES), len(lines))
    return [lines[i][:TAIL_WIDTH] for i in sorted(set(errors) | set(tail))]


def skipped_cases(test):
    """The GoogleTest cases a test's output reports as skipped, each once, in order."""
    lines = ((test.get("stdout") or "") + (test.get("stderr") or "")).splitlines()
    return list(dict.fromkeys(m.group(1) for line in lines if (m := GTEST_SKIPPED.match(line))))


passed = failed = skipped = 0
with open(sys.argv[1]) as log:
    for line in log:
        test = json.loads(line)
        result = test.get("result", "")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
            cases = skipped_cases(test)
            if cases:
                shown = ", ".join(cases[:6]) + (", ..." if len(cases) > 6 else "")
                print(f"SKIPPED CASES: {len(cases)} in {test.get('name', '?')} ({shown})")
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
            print(f"FAILED: {test.get('name', '?')} ({result} after {test.get('duration', 0):.0f} s)")
            for reason in why(test):
                print(f"FAILED: | {reason}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
