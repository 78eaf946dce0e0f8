"""The package as `meson install` installs it: every file under python/zrt listed in
python/meson.build, and the example run from an installed copy (not the source tree)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, environment

PACKAGE = os.path.join(REPO, "python")


def listed_files():
    with open(os.path.join(PACKAGE, "meson.build")) as f:
        return set(re.findall(r"'(zrt/[^']+\.py(?:\.in)?)'", f.read()))


def package_files():
    found = set()
    for folder, _, files in os.walk(os.path.join(PACKAGE, "zrt")):
        for name in files:
            if name.endswith((".py", ".py.in")):
                found.add(os.path.relpath(os.path.join(folder, name), PACKAGE))
    return found


def test_every_package_file_is_installed():
    unlisted = sorted(package_files() - listed_files())
    assert not unlisted, (f"python/meson.build does not install {', '.join(unlisted)}: add them "
                          "to its install_sources lists")
    missing = sorted(listed_files() - package_files())
    assert not missing, f"python/meson.build lists files that do not exist: {missing}"


def test_installed_copy_runs_the_example(tmp_path):
    build = os.environ.get("ZRT_BUILD_DIR")
    if not build:
        pytest.skip("ZRT_BUILD_DIR is not set (meson test sets it)")
    destdir = tmp_path / "root"
    subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir",
                    str(destdir)], check=True, capture_output=True, text=True, timeout=300)
    packages = [os.path.dirname(path) for path in
                map(str, destdir.rglob("zrt/__init__.py"))]
    assert len(packages) == 1, f"meson install put zrt/__init__.py at {packages}"
    site = os.path.dirname(packages[0])
    libdirs = {os.path.dirname(str(path)) for path in destdir.rglob("libzrt.so.0")}
    runners = list(map(str, destdir.rglob("bin/zrt-run")))
    assert len(libdirs) == 1 and len(runners) == 1, (libdirs, runners)
    example = tmp_path / "torch_train.py"  # outside the tree: its sys.path entry finds nothing
    shutil.copy(os.path.join(REPO, "examples", "torch_train.py"), example)
    env = environment({"LD_LIBRARY_PATH": libdirs.pop()})
    env.pop("ZRT_LIBRARY", None)
    env["PYTHONPATH"] = site
    where = subprocess.run([sys.executable, "-c", "import zrt, zrt.torch; "
                            "print(zrt.__file__); print(zrt._lib.library_path)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    package_file, library = where.stdout.split()
    assert package_file.startswith(str(destdir)), package_file
    assert library.startswith(str(destdir)) or "libzrt.so.0" == os.path.basename(library), library
    result = subprocess.run([runners[0], "-n", "2", "--timeout", "120", sys.executable,
                             str(example), "--steps", "3", "--layers", "1", "--dim", "32"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "step" in result.stdout, result.stdout[-2000:]
