#!/usr/bin/env bash
# gpu-check.sh: checks stemdot's GPU path on a machine with an NVIDIA GPU in about three
# minutes: correctness of every kernel, then throughput against the machine's bounds.
#
#   scripts/gpu-check.sh --build   # on the build machine (nvcc, CMake, Go): builds
#                                  # bin/cuda.test, bin/gpucheck (and bin/stemdot with CUDA)
#   scripts/gpu-check.sh           # on the GPU machine (no Go, no toolkit; carry bin/):
#                                  # runs them
#
# The binaries link the CUDA runtime statically and need only the NVIDIA driver.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--build" ]; then
	cmake -S . -B build/kernels -DCMAKE_BUILD_TYPE=Release
	cmake --build build/kernels -j"$(nproc)"
	mkdir -p bin
	go test -c -tags cuda -o bin/cuda.test ./cuda
	go build -tags cuda -o bin/gpucheck ./bench/gpucheck
	if ldd bin/gpucheck | grep -q libcudart; then
		echo "gpu-check: bin/gpucheck links libcudart dynamically (want libcudart_static)" >&2
		exit 1
	fi
	go build -tags cuda -o bin/stemdot ./cmd/stemdot || echo "gpu-check: bin/stemdot not built (CLI section will be skipped)" >&2
	echo "built: $(ls bin | tr '\n' ' ')"
	exit 0
fi

for b in bin/cuda.test bin/gpucheck; do
	if [ ! -x "$b" ]; then
		echo "gpu-check: $b missing: run scripts/gpu-check.sh --build first and carry bin/" >&2
		exit 1
	fi
done

status=0
echo "== device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
	--format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"

echo "== correctness: every kernel (dtype x masks x dense/sparse x f32/f64) against a float64 reference"
log=$(mktemp)
if ! bin/cuda.test -test.count=1 -test.v -test.timeout=150s >"$log" 2>&1; then
	status=1
fi
grep -E -- '^(--- FAIL|FAIL|panic)|^\s+cuda_test.go' "$log" | grep -v 'no CUDA device' | head -40 || true
echo "subtests: $(grep -c -- '--- PASS' "$log" || true) passed, $(grep -c -- '--- FAIL' "$log" || true) failed, $(grep -c -- '--- SKIP' "$log" || true) skipped"
if grep -q 'no CUDA device' "$log"; then
	echo "gpu-check: tests found no CUDA device" >&2
	status=1
fi
tail -n 1 "$log"
rm -f "$log"

echo "== throughput"
timeout 120 bin/gpucheck || status=1

# ---------------------------------------------------------------------------------------
# Phase 2: CPU-only vs GPU vs hybrid plans on a synthetic file through the stemdot CLI.
# Runs only when bin/stemdot was built (scripts/gpu-check.sh --build builds it with CUDA).
# ---------------------------------------------------------------------------------------
echo "== CLI plans (bin/stemdot apply): CPU-only vs GPU-only vs hybrid, 1/4/16/64 dense masks"
if [ -x bin/stemdot ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	if bin/stemdot synth --out "$tmp/scan.npy" --nav-shape 128,64 --sig-shape 256,256 --dtype uint16 >/dev/null; then
		for n in 1 4 16 64; do
			masks=()
			for i in $(seq 1 "$n"); do masks+=(--mask "rect:0,0,256,$((257 - i))"); done # dense
			for plan in "--gpus 0" "--cpus 0 --gpus 1" "--gpus auto"; do
				# shellcheck disable=SC2086
				line=$(bin/stemdot apply "$tmp/scan.npy" "${masks[@]}" --out "$tmp/result.npy" $plan 2>&1 | tail -n 1) || status=1
				printf '%2d masks  %-18s %s\n' "$n" "$plan" "$line"
			done
		done
	else
		status=1
	fi
else
	echo "bin/stemdot not built: skipped"
fi
exit $status
