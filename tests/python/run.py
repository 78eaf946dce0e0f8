"""Runs the python suite with pytest; exit status 77 (a skip, for meson) when this Python lacks
torch or pytest, with the reason and what to run instead. Under CI=true the suite must run, so
the same case is a failure there."""
import os
import sys

if len(sys.argv) > 2 and sys.argv[1] == "--missing":
    print(f"python suite cannot run: {sys.argv[2]} does not exist; run scripts/install-deps.sh "
          "(it makes the venv /opt/zrt/venv with torch 2.x)", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

try:
    import pytest
    import torch
except ImportError as error:
    print(f"python suite cannot run: {sys.executable} cannot import {error.name}; run "
          "scripts/install-deps.sh (the venv /opt/zrt/venv with torch 2.x; Debian's "
          "python3-torch and python3-pytest for /usr/bin/python3)", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

print(f"python suite: {sys.executable}, torch {torch.__version__}", flush=True)
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider",
                      os.path.dirname(os.path.abspath(__file__))] + sys.argv[1:]))
