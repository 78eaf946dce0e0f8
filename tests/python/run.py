"""Runs the python suite with pytest; exit status 77 (a skip, for meson) when this Python lacks
torch or pytest, with the reason and what to run instead."""
import os
import sys

try:
    import pytest
    import torch  # noqa: F401
except ImportError as error:
    print(f"python suite skipped: {sys.executable} cannot import {error.name}; install "
          "python3-torch and python3-pytest (scripts/install-deps.sh), or configure meson "
          "with the Python that has them", file=sys.stderr)
    sys.exit(77)

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", os.path.dirname(os.path.abspath(__file__))]
                     + sys.argv[1:]))
