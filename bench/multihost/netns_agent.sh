#!/usr/bin/env bash
# Open MPI's launch agent for the simulated hosts (mpirun --mca plm_rsh_agent): called as
# ssh would be, "AGENT [options] HOST COMMAND...", it runs COMMAND through a shell on the
# simulated host HOST (NAME-hI, scripts/netns.sh) instead of logging in somewhere.
set -euo pipefail
netns=$(dirname "$0")/../../scripts/netns.sh
while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done  # ssh options mpirun may pass
host=$1; shift
[[ $host =~ ^(.+)-h([0-9]+)$ ]] || { echo "netns_agent: '$host' is not a NAME-hI host" >&2; exit 2; }
exec "$netns" exec "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" /bin/sh -c "$*"
