#!/usr/bin/env bash
# Installs what Loom needs to build and test on a fresh Debian machine, when
# run as root; otherwise says what is missing. Optional parts (CUDA, verbs,
# UCX, hwloc, MPI) are never required. Sourced or run by run.sh and test.sh.
set -euo pipefail

# iproute2 (ip, ss, tc) and nftables: the network suite's hosts in namespaces
# (tests/net); util-linux (setpriv, unshare) and mount are part of every Debian (the network
# suite skips, saying so, where a tool it needs is missing).
# python3 and gnuplot-nox: the perf tools' JSON check and perf/plot.
# clang-format: scripts/format.sh --check, the first step of scripts/test.sh.
# libopenblas-dev: libloom_parallel's host GEMM (CBLAS); python3-torch: the parallel layer's
# math checked against PyTorch on CPU (tests/parallel/torch_check.sh, numpy for its files).
# libtorch-dev, python3-dev and pybind11-dev: the torch.distributed backend (compat/torch),
# built against Debian's PyTorch and tested against its Gloo backend.
# ccache: scripts/test.sh builds three trees (main, ASan, TSan); a rerun on the same machine
# compiles only what changed.
LOOM_PACKAGES=(build-essential cmake pkg-config libgtest-dev valgrind iproute2 procps nftables
               python3 gnuplot-nox clang-format libopenblas-dev python3-torch python3-numpy
               libtorch-dev python3-dev pybind11-dev ccache)

# deps_missing PKG...: prints the ones not installed, space-separated.
deps_missing() {
  local p out=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "ok installed" >/dev/null || out+=("$p")
  done
  echo "${out[*]}"
}

# deps_install PKG...: installs the missing ones as root; otherwise names them
# and fails.
deps_install() {
  local missing=()
  read -ra missing <<<"$(deps_missing "$@")"
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "loom: missing packages: ${missing[*]}" >&2
    echo "loom: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
  echo "loom: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}

loom_deps() { deps_install "${LOOM_PACKAGES[@]}"; }

if [ "${BASH_SOURCE[0]}" = "$0" ]; then loom_deps; fi
