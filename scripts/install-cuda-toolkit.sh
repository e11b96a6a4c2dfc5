#!/usr/bin/env bash
# Installs Debian's CUDA toolkit (nvcc, CUDA runtime headers, libcudart_static.a) so that
# `make` can build stemdot's GPU kernels (kernels/, cuda/ with -tags cuda).
#
# Debian 12 (bookworm) ships CUDA 11.8 as nvidia-cuda-toolkit in the non-free component
# (its dependencies are in contrib and non-free). The script enables contrib and non-free
# in the apt sources (deb822 /etc/apt/sources.list.d/debian.sources or the one-line
# /etc/apt/sources.list), updates the package lists and installs the toolkit without
# recommends (~1.6 GB). It needs root, and exits at once when nvcc already works.
#
# Usage: sudo scripts/install-cuda-toolkit.sh
set -euo pipefail

if command -v nvcc >/dev/null 2>&1 && nvcc --version >/dev/null 2>&1; then
	echo "nvcc already installed: $(nvcc --version | tail -n 1)"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-cuda-toolkit.sh: must run as root (apt-get install)" >&2
	exit 1
fi

# enable_components FILE: add contrib and non-free to every Components: line (deb822) or
# every "deb ... main" line (one-line format) that lacks them.
enable_components() {
	local f=$1
	[ -f "$f" ] || return 0
	case "$f" in
	*.sources)
		sed -i -E '/^Components:/{/ contrib( |$)/! s/$/ contrib/; / non-free( |$)/! s/$/ non-free/}' "$f"
		;;
	*)
		sed -i -E '/^deb(-src)?[[:space:]]/{/ contrib( |$)/! s/$/ contrib/; / non-free( |$)/! s/$/ non-free/}' "$f"
		;;
	esac
}

enable_components /etc/apt/sources.list.d/debian.sources
enable_components /etc/apt/sources.list

apt-get update
# nvidia-cuda-toolkit brings nvcc, nvidia-cuda-dev (cuda_runtime.h, libcudart_static.a
# in /usr/lib/x86_64-linux-gnu) and the supported host compiler.
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nvidia-cuda-toolkit

nvcc --version | tail -n 1
