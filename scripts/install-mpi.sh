#!/bin/sh
# Installs Open MPI (mpirun + headers + libmpi) for Ascent's multi-process launch
# and its tests. Idempotent: does nothing when mpirun and mpicc are already there.
# Debian / Ubuntu only (apt-get); elsewhere it says what to install and fails.
# Waits up to 5 min for the dpkg lock (another install on a shared machine).
set -eu

if command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1; then
  echo "install-mpi: Open MPI already installed ($(mpirun --version 2>/dev/null | head -n 1)); nothing to do"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-mpi: apt-get not found. HINT: install Open MPI (mpirun, mpicc and libmpi headers) with this system's package manager." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-mpi: needs root (or sudo) to run apt-get. HINT: run it as root, or install openmpi-bin and libopenmpi-dev yourself." >&2
    exit 1
  fi
fi
echo "install-mpi: apt-get update"
$SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq
echo "install-mpi: apt-get install -y openmpi-bin libopenmpi-dev"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev
echo "install-mpi: installed $(mpirun --version 2>/dev/null | head -n 1) (mpicc: $(command -v mpicc))"
