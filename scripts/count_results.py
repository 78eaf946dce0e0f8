#!/usr/bin/env python3
"""Prints "N passed, N failed, N skipped" from a meson testlog.json (the line CI adds up).

Expected failures count as passed; anything that is neither OK, EXPECTEDFAIL nor SKIP
(FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS) counts as failed. Used by scripts/test.sh and
scripts/sanitize.sh.
"""
import json
import sys

passed = failed = skipped = 0
with open(sys.argv[1]) as log:
    for line in log:
        result = json.loads(line).get("result", "")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
