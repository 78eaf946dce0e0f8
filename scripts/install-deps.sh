#!/usr/bin/env bash
# Installs the Debian 12 packages zrt needs to build, test and run its examples. Idempotent:
# installs only what is missing. Runs apt-get as root (directly, or through sudo).
#
#   scripts/install-deps.sh              everything, for the default build (bench option on)
#   scripts/install-deps.sh --no-bench   without what only the benchmarks need (-Dbench=false)
set -euo pipefail

bench=1
for arg in "$@"; do
  case "$arg" in
    --no-bench) bench=0 ;;
    *) echo "install-deps: unknown argument '$arg' (use --no-bench or nothing)" >&2; exit 2 ;;
  esac
done

packages=(
  meson ninja-build pkg-config g++ clang
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
  python3-torch python3-pytest  # the python suite (zrt.torch against DDP); use /usr/bin/python3
)
if [ "$bench" -eq 1 ]; then
  packages+=(
    openmpi-bin libopenmpi-dev  # bench/peers: Open MPI side by side with zrt (mpi_bench, mpirun)
  )
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
echo "install-deps: done"
