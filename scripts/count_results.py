#!/usr/bin/env python3
"""Prints "N passed, N failed, N skipped" from a meson testlog.json (the line CI adds up).

Expected failures count as passed; anything that is neither OK, EXPECTEDFAIL nor SKIP
(FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS) counts as failed. Each failed test is named first on a
line "FAILED: NAME (RESULT after N s)", because CI keeps only the tail of its log and the
count alone does not say which test to look at; its output's error lines (a unittest's "FAIL:"
and "AssertionError", gtest's "Failure") and last lines follow, each behind "FAILED: | ", so
that a flaky failure seen once in CI says why, not only where. Used by
scripts/test.sh and scripts/sanitize.sh.
"""
import json
import re
import sys

TAIL_LINES = 12  # of a failed test's output, each cut to TAIL_WIDTH characters
TAIL_WIDTH = 240
ERROR_LINES = 8  # the first lines that say what failed, before the tail
ERROR = re.compile(r"^(FAIL|ERROR): |^\w*(Error|Exception)\b|Failure$|\bFAILED\b|Expected")


def why(test):
    """The lines of a failed test's output that say why: the first error lines, then the tail."""
    lines = ((test.get("stdout") or "") + (test.get("stderr") or "")).rstrip().splitlines()
    errors = [i for i, line in enumerate(lines) if ERROR.search(line)][:ERROR_LINES]
    tail = range(max(0, len(lines) - TAIL_LINES), len(lines))
    return [lines[i][:TAIL_WIDTH] for i in sorted(set(errors) | set(tail))]


passed = failed = skipped = 0
with open(sys.argv[1]) as log:
    for line in log:
        test = json.loads(line)
        result = test.get("result", "")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
            print(f"FAILED: {test.get('name', '?')} ({result} after {test.get('duration', 0):.0f} s)")
            for reason in why(test):
                print(f"FAILED: | {reason}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
