#!/usr/bin/env python3
"""Prints "N passed, N failed, N skipped" from a meson testlog.json (the line CI adds up).

Expected failures count as passed; anything that is neither OK, EXPECTEDFAIL nor SKIP
(FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS) counts as failed. Each failed test is named first on a
line "FAILED: NAME (RESULT after N s)", because CI keeps only the tail of its log and the
count alone does not say which test to look at. Used by scripts/test.sh and scripts/sanitize.sh.
"""
import json
import sys

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
print(f"{passed} passed, {failed} failed, {skipped} skipped")
