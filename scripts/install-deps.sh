#!/usr/bin/env bash
# Installs what zrt needs to build, test and run its examples on Debian 12. Idempotent:
# installs only what is missing. Runs apt-get as root (directly, or through sudo).
#   1. Debian's packages (the toolchain, UCX, hwloc, GoogleTest, ..., and Debian's torch 1.13,
#      which the python suite also runs on).
#   2. A Python venv with torch 2.x and the rest of python/requirements.txt, at $ZRT_VENV
#      (default /opt/zrt/venv): the torch the examples, benchmarks and python suite use.
#   3. NCCL's headers and library (from that venv's nvidia-nccl-cu13) linked into the CUDA
#      toolkit folder when the toolkit is there without NCCL, so the NCCL transport builds.
#
#   scripts/install-deps.sh              everything, for the default build (bench option on)
#   scripts/install-deps.sh --no-bench   without what only the benchmarks need (-Dbench=false)
set -euo pipefail
cd "$(dirname "$0")/.."

bench=1
for arg in "$@"; do
  case "$arg" in
    --no-bench) bench=0 ;;
    *) echo "install-deps: unknown argument '$arg' (use --no-bench or nothing)" >&2; exit 2 ;;
  esac
done

packages=(
  meson ninja-build pkg-config g++ clang
  libclang-rt-14-dev            # clang's sanitizer and libFuzzer runtimes (tests/fuzz)
  libucx-dev ucx-utils          # host transport (shared memory, cma, tcp, RDMA)
  libhwloc-dev hwloc            # topology for zrt-topo and zrt-run --bind
  libgtest-dev libgmock-dev     # unit and multi-rank tests
  libbenchmark-dev              # micro-benchmarks
  libcli11-dev                  # command lines of the tools (header-only)
  nlohmann-json3-dev            # JSON configs, profiles, checkpoint manifests, --json output
  libxxhash-dev                 # XXH3 checksums of checkpoint files (10+ GB/s: verifying is cheap)
  libfmt-dev                    # formatting (std::format is not in g++ 12)
  libopenblas-dev               # sgemm for the train_lm example's own kernels
  wamerican                     # /usr/share/dict/words: train_lm's corpus
  patchelf                      # RPATHs of the GPU bundle (tests/gpu/bundle.sh)
  python3-torch python3-pytest  # the python suite on Debian's torch 1.13 (/usr/bin/python3)
)
if [ "$bench" -eq 1 ]; then
  packages+=(
    openmpi-bin libopenmpi-dev  # bench/peers: Open MPI side by side with zrt (mpi_bench, mpirun)
  )
fi

install_debian_packages() {
  local missing=() package
  for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} Debian packages present"
    return
  fi
  echo "install-deps: installing ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# The venv's own python3 -m venv needs a Python with venv and ensurepip: the first of these.
find_venv_python() {
  local candidate
  for candidate in python3.11 python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import venv, ensurepip' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
  echo "install-deps: no Python 3 with venv and ensurepip (apt-get install python3-venv)" >&2
  return 1
}

install_python_venv() {
  local venv=${ZRT_VENV:-/opt/zrt/venv} requirements=python/requirements.txt stamp
  stamp="$venv/.zrt-requirements"
  if [ -x "$venv/bin/python3" ] && [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
    echo "install-deps: venv $venv has python/requirements.txt"
    return
  fi
  if [ ! -x "$venv/bin/python3" ]; then
    echo "install-deps: creating the venv $venv"
    "${as_root[@]}" "$(find_venv_python)" -m venv "$venv"
  fi
  echo "install-deps: installing python/requirements.txt into $venv"
  # The machine's CPU build of torch lies in /opt/wheels where it has one; pip takes it from
  # there without a download.
  local find_links=()
  if [ -d /opt/wheels ]; then find_links=(--find-links /opt/wheels); fi
  "${as_root[@]}" "$venv/bin/pip" install -q --disable-pip-version-check "${find_links[@]}" \
    -r "$requirements"
  "${as_root[@]}" cp "$requirements" "$stamp"
}

# NCCL ships no Debian package; its pip wheel carries nccl.h and libnccl.so.2. The build and
# tests/gpu/bundle.sh look for NCCL in the toolkit folder, as NVIDIA's own install puts it.
link_nccl_into_toolkit() {
  local cuda=${CUDA_HOME:-/usr/local/cuda} venv=${ZRT_VENV:-/opt/zrt/venv} nccl
  if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "install-deps: no CUDA toolkit under $cuda: the build leaves CUDA and NCCL out"
    return
  fi
  if [ -f "$cuda/include/nccl.h" ] && [ ! -L "$cuda/include/nccl.h" ]; then
    echo "install-deps: NCCL present in $cuda"
    return
  fi
  nccl=$("$venv/bin/python3" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  "${as_root[@]}" ln -sfn "$nccl/include/nccl.h" "$cuda/include/nccl.h"
  "${as_root[@]}" ln -sfn "$nccl/include/nccl_device.h" "$cuda/include/nccl_device.h"
  "${as_root[@]}" ln -sfn "$nccl/include/nccl_device" "$cuda/include/nccl_device"
  "${as_root[@]}" ln -sfn "$nccl/lib/libnccl.so.2" "$cuda/lib64/libnccl.so.2"
  "${as_root[@]}" ln -sfn libnccl.so.2 "$cuda/lib64/libnccl.so"
  echo "install-deps: NCCL linked into $cuda from $nccl"
}

as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
install_debian_packages
install_python_venv
link_nccl_into_toolkit
echo "install-deps: done"
