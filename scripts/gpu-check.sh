#!/usr/bin/env bash
# gpu-check.sh: checks stemdot's GPU path on a machine with an NVIDIA GPU in about three
# minutes: correctness of every kernel and of the copy-free feed, the kernels' and feeds'
# throughput against the machine's bounds, then CPU-only vs hybrid vs GPU-only plans end
# to end through the CLI on a page-cached raw file of >= 16 GB and a 1 GB MIB file, one
# GPU worker alone (its feed and rate), shifted masks (descan) at 1 and 16 masks, and the
# start-up cost on an 8-frame file.
#
#   scripts/gpu-check.sh --build   # on the build machine (nvcc, CMake, Go): builds the
#                                  # stripped, gzipped binaries into bin/gpu/
#   scripts/gpu-check.sh           # on the GPU machine (no Go, no toolkit; carry bin/gpu)
#
# The binaries link the CUDA runtime statically and need only the NVIDIA driver. On the
# GPU machine, GPU_CHECK_DIR (default /tmp/gpu-check) holds the data files (17 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin/gpu

case "${1:-}" in
-h | --help)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
	;;
"" | --build) ;;
*)
	echo "gpu-check: unknown argument $1 (want --build, --help or none)" >&2
	exit 2
	;;
esac
if [ "${1:-}" = "--build" ]; then
	cmake -S . -B build/kernels -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/kernels -j"$(nproc)"
	rm -rf "$out" && mkdir -p "$out"
	flags=(-tags cuda,nohdf5 -ldflags=-s\ -w -trimpath) # no libhdf5 on the GPU machine
	# Relink after the kernels changed: Go's cache does not key on the archive's contents
	# (see kernels_env in the Makefile).
	export CGO_LDFLAGS="${CGO_LDFLAGS:--O2 -g} -Wl,--defsym=stemdot_kernels_$(cksum <build/kernels/libstemdot_kernels.a | cut -d' ' -f1)=0"
	go test -c "${flags[@]}" -o "$out/cuda.test" ./cuda
	go test -c "${flags[@]}" -o "$out/engine.test" ./engine
	go test -c -ldflags=-s\ -w -trimpath -o "$out/affinity.test" ./affinity
	go test -c "${flags[@]}" -o "$out/stemdot.test" .
	go build "${flags[@]}" -o "$out/gpucheck" ./bench/gpucheck
	go build "${flags[@]}" -o "$out/stemdot" ./cmd/stemdot
	if ldd "$out/stemdot" | grep -qE "libcudart|libhdf5"; then
		echo "gpu-check: bin/stemdot links libcudart or libhdf5 dynamically (the GPU machine has neither)" >&2
		exit 1
	fi
	gzip -9 "$out"/*
	# The real detector files, for the tests that use them (never committed: bin/ is ignored).
	data=${STEMDOT_TESTDATA:-../shared/data}
	if [ -d "$data" ]; then tar -czf "$out/testdata.tgz" -C "$data" .; fi
	du -ch "$out"/* | tail -n 1
	exit 0
fi

for b in cuda.test engine.test affinity.test stemdot.test gpucheck stemdot; do
	if [ ! -f "$out/$b.gz" ]; then
		echo "gpu-check: $out/$b.gz missing: run scripts/gpu-check.sh --build first and carry bin/gpu" >&2
		exit 1
	fi
done
if ! nvidia-smi -L >/dev/null 2>&1 && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
	echo "gpu-check: no NVIDIA GPU here (no /dev/nvidia0, nvidia-smi finds none): run it on the GPU machine" >&2
	exit 1
fi
bin=$(mktemp -d)
if [ -f "$out/testdata.tgz" ]; then
	mkdir -p "$bin/data" && tar -xzf "$out/testdata.tgz" -C "$bin/data"
	export STEMDOT_TESTDATA=$bin/data
fi
for b in "$out"/*.gz; do
	gunzip -c "$b" >"$bin/$(basename "$b" .gz)"
	chmod +x "$bin/$(basename "$b" .gz)"
done
status=0
echo "== device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
	--format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"
echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"

# tests BINARY ARGS...: runs a test binary, prints failures and counts.
tests() {
	local name=$1 log
	shift
	log=$(mktemp)
	if ! "$bin/$name" -test.count=1 -test.v "$@" >"$log" 2>&1; then
		status=1
	fi
	grep -E -A4 -- '^(--- FAIL|panic)|^\s+\S+_test.go:[0-9]+: *$' "$log" | head -40 || true
	grep -E '^\s+\S+_test.go:[0-9]+: .*GB/s' "$log" | sed 's/^ */  /' || true # measurements the tests log
	echo "$name: $(grep -c -- '--- PASS' "$log" || true) passed, $(grep -c -- '--- FAIL' "$log" || true) failed, $(grep -c -- '--- SKIP' "$log" || true) skipped"
	if grep -q 'no CUDA device' "$log"; then
		echo "gpu-check: $name found no CUDA device" >&2
		status=1
	fi
	rm -f "$log"
}
echo "== correctness: kernels (dtype x masks x dense/sparse x f32/f64) and the mapped feed vs float64"
tests cuda.test -test.timeout=120s
echo "== GPU discovery (NVML through dlopen)"
tests affinity.test -test.run 'DiscoverGPUs|NVML' -test.timeout=30s
echo "== engine with GPU workers"
tests engine.test -test.timeout=60s
echo "== Go API: data held on the GPU vs the CPU engine"
tests stemdot.test -test.run 'ToDevice|Resident' -test.timeout=60s

echo "== throughput (kernels on device-resident frames; runners; mapped feed)"
timeout 90 "$bin/gpucheck" || status=1

echo "== plans end to end (bin/stemdot apply; GB/s of native frame bytes while the engine runs, wall s of the process)"
dir=${GPU_CHECK_DIR:-/tmp/gpu-check}
mkdir -p "$dir"
sd="$bin/stemdot"
t0=$(date +%s)
# 1 GiB raw (8192 frames of 256x256 uint16), concatenated 16 times: 17.2 GB.
"$sd" synth --out "$dir/one.raw" --nav-shape 64,128 --sig-shape 256,256 --dtype uint16 >/dev/null
for _ in $(seq 16); do cat "$dir/one.raw"; done >"$dir/big.raw"
rm -f "$dir/one.raw"
"$sd" synth --out "$dir/scan.mib" --nav-shape 64,128 --sig-shape 256,256 --dtype uint16 >/dev/null
"$sd" synth --out "$dir/tiny.mib" --nav-shape 2,4 --sig-shape 256,256 --dtype uint16 >/dev/null
cat "$dir/big.raw" "$dir/scan.mib" >/dev/null # page cache
echo "data made in $(($(date +%s) - t0)) s: $(du -h "$dir/big.raw" | cut -f1) raw, $(du -h "$dir/scan.mib" | cut -f1) MIB"

# run NAME FILE MASKSPEC PLAN...: one apply; prints GB/s, wall time and GPU worker lines.
run() {
	local name=$1 file=$2 masks=$3 start end log gbs
	shift 3
	log=$(mktemp)
	start=$(date +%s.%N)
	# shellcheck disable=SC2086
	if ! "$sd" apply "$file" $masks --out "$dir/r.npy" --workers "$@" >"$log" 2>&1; then
		status=1
		echo "  $name: FAILED: $(tail -n 3 "$log")"
		rm -f "$log"
		return
	fi
	end=$(date +%s.%N)
	gbs=$(sed -n 's/.*(\([0-9.]*\) GB\/s).*/\1/p' "$log" | head -n 1)
	printf '  %-34s %8s GB/s %7.3f s wall  %s\n' "$name" "$gbs" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" \
		"$(grep -oE '[0-9]+ workers? \([0-9]+ cpu, [0-9]+ gpu\)' "$log")"
	grep -E '^\s+worker [0-9]+ \(gpu' "$log" | sed 's/^ */      /' || true
	grep -E 'warning' "$log" | sed 's/^/      /' || true
	rm -f "$log"
}
rects() { for i in $(seq 1 "$1"); do printf -- '--mask rect:0,0,256,%d ' $((257 - i)); done; }
for file in big.raw scan.mib; do
	opts=()
	[ "$file" = big.raw ] && opts=(--sig-shape 256,256 --dtype uint16 --nav-shape 1024,128)
	for m in 1 4 16 64 ring; do
		if [ "$m" = ring ]; then spec="--mask ring:128,128,90,100"; else spec=$(rects "$m"); fi
		echo "$file, $m masks:"
		run "cpu-only" "$dir/$file" "$spec" "${opts[@]}" --gpus 0
		run "hybrid (--gpus auto)" "$dir/$file" "$spec" "${opts[@]}" --gpus auto
		run "gpu-only (--cpus 0 --gpus auto)" "$dir/$file" "$spec" "${opts[@]}" --cpus 0 --gpus auto
		if [ "$m" = 1 ] || [ "$m" = 64 ]; then
			run "one GPU worker (--cpus 0 --gpus 1)" "$dir/$file" "$spec" "${opts[@]}" --cpus 0 --gpus 1
		fi
		if [ "$m" = 1 ] || [ "$m" = 16 ]; then
			# Shifted masks (descan), sub-pixel: the GPU workers build g_f on the device from
			# the native frames (copy-free feed); compare with the unshifted rows above.
			run "shifted, cpu-only" "$dir/$file" "$spec --shift 0.5,-1.5" "${opts[@]}" --gpus 0
			run "shifted, gpu-only" "$dir/$file" "$spec --shift 0.5,-1.5" "${opts[@]}" --cpus 0 --gpus auto
		fi
	done
done
echo "start-up, 8-frame MIB, 4 masks (wall time of the whole process):"
spec=$(rects 4)
for plan in "--gpus 0" "--gpus auto" "--gpus 1"; do
	# shellcheck disable=SC2086
	run "$plan" "$dir/tiny.mib" "$spec" $plan
done
rm -rf "$dir" "$bin"
exit $status
