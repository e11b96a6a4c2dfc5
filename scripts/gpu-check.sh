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
#
# The GPU record: the run also writes gpu.json (fixed keys: date, commit, device, driver,
# host, limits, kernel_gbps, feed_gbps, plans, shifted, resident_ms, startup_s,
# registration; every value measured in that run or {"not_measured": "reason"}), beside
# its log gpu-check.log, the measurement lines gpu-check.tsv and gpucheck.json, all in $OUT
# when it is set (the device tool's output folder), else in bin/gpu-check/. Commit gpu.json
# as bench/results/gpu.json with bench/RESULTS.md. The commit recorded is the one --build
# ran on (bin/gpu/build.tsv: git rev-parse HEAD and whether the tree was dirty).
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
	# shellcheck disable=SC2054 # the commas are the tags' and the flags' own
	flags=(-tags cuda,nohdf5 -ldflags=-s\ -w -trimpath) # no libhdf5 on the GPU machine
	# Relink after the kernels changed: Go's cache does not key on the archive's contents
	# (see kernels_env in the Makefile).
	CGO_LDFLAGS="${CGO_LDFLAGS:--O2 -g} -Wl,--defsym=stemdot_kernels_$(cksum <build/kernels/libstemdot_kernels.a | cut -d' ' -f1)=0"
	export CGO_LDFLAGS
	go test -c "${flags[@]}" -o "$out/cuda.test" ./cuda
	go test -c "${flags[@]}" -o "$out/engine.test" ./engine
	go test -c -ldflags=-s\ -w -trimpath -o "$out/affinity.test" ./affinity
	go test -c "${flags[@]}" -o "$out/stemdot.test" .
	go build "${flags[@]}" -o "$out/gpucheck" ./bench/gpucheck
	go build "${flags[@]}" -o "$out/stemdot" ./cmd/stemdot
	CGO_ENABLED=0 go build -ldflags=-s\ -w -trimpath -o "$out/gpurecord" ./bench/gpurecord
	if ldd "$out/stemdot" | grep -qE "libcudart|libhdf5"; then
		echo "gpu-check: bin/stemdot links libcudart or libhdf5 dynamically (the GPU machine has neither)" >&2
		exit 1
	fi
	gzip -9 "$out"/*
	dirty=clean
	if [ -n "$(git status --porcelain 2>/dev/null)" ]; then dirty=dirty; fi
	printf 'commit\t%s\t%s\t%s\n' "$(git rev-parse HEAD)" "$dirty" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$out/build.tsv"
	# The real detector files, for the tests that use them (never committed: bin/ is ignored).
	data=${STEMDOT_TESTDATA:-../shared/data}
	if [ -d "$data" ]; then tar -czf "$out/testdata.tgz" -C "$data" .; fi
	du -ch "$out"/* | tail -n 1
	exit 0
fi

for b in cuda.test engine.test affinity.test stemdot.test gpucheck stemdot gpurecord; do
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
dir=${GPU_CHECK_DIR:-/tmp/gpu-check}
rec=${OUT:-bin/gpu-check}
mkdir -p "$rec"
rm -f "$rec/gpu.json" "$rec/gpucheck.json"
lines=$rec/gpu-check.tsv
: >"$lines"
exec > >(tee "$rec/gpu-check.log") 2>&1
# line FIELD...: appends one measurement line for gpurecord (tabs and newlines in fields
# become spaces).
line() {
	local f fields=()
	for f in "$@"; do fields+=("$(printf '%s' "$f" | tr '\t\n' '  ')"); done
	(
		IFS=$'\t'
		printf '%s\n' "${fields[*]}"
	) >>"$lines"
}
# finish: assembles the record from what was measured (also when the script stops early),
# then removes the data and the unpacked binaries.
# shellcheck disable=SC2317 # invoked by the EXIT trap
finish() {
	local rc=$?
	if "$bin/gpurecord" -lines "$lines" -gpucheck "$rec/gpucheck.json" -o "$rec/gpu.json"; then :; else
		echo "gpu-check: the record could not be assembled" >&2
		rc=1
	fi
	rm -rf "$dir" "$bin"
	exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT # (the EXIT trap then records what was measured before the signal)
trap 'exit 143' TERM
line date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
if [ -f "$out/build.tsv" ]; then cat "$out/build.tsv" >>"$lines"; fi
echo "== device"
if smi=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
	--format=csv,noheader 2>/dev/null); then
	echo "$smi"
	while IFS= read -r l; do line nvidia-smi "$l"; done <<<"$smi"
else
	echo "(nvidia-smi not available)"
fi
echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
line host "$(nproc)" "$(awk '/MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)" \
	"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"

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
	local pass fail skip
	pass=$(grep -c -- '--- PASS' "$log" || true)
	fail=$(grep -c -- '--- FAIL' "$log" || true)
	skip=$(grep -c -- '--- SKIP' "$log" || true)
	echo "$name: $pass passed, $fail failed, $skip skipped"
	line tests "$name" "$pass" "$fail" "$skip"
	# The driver's registration rate (cuda.test's TestRegistrationScaling).
	sed -n 's/.*registration: \([0-9]*\) thread(s): \([0-9.]*\) GB\/s.*/\1\t\2/p' "$log" | while IFS=$'\t' read -r th gb; do
		line registration "$th" "$gb"
	done
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
gc=0
timeout 90 "$bin/gpucheck" -json "$rec/gpucheck.json" || gc=$?
line gpucheck "$gc"
[ "$gc" = 0 ] || status=1

echo "== plans end to end (bin/stemdot apply; GB/s of native frame bytes while the engine runs, wall s of the process)"
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
line data raw "$(stat -c %s "$dir/big.raw")"
line data mib "$(stat -c %s "$dir/scan.mib")"
line data tiny_mib "$(stat -c %s "$dir/tiny.mib")"

# run KEY NAME FILE MASKSPEC PLAN...: one apply; prints GB/s, wall time and GPU worker
# lines, and records them as an apply line with KEY, $label (the file) and $m (the masks).
run() {
	local key=$1 name=$2 file=$3 masks=$4 start end log gbs wall workers gpus
	shift 4
	log=$(mktemp)
	start=$(date +%s.%N)
	# shellcheck disable=SC2086
	if ! "$sd" apply "$file" $masks --out "$dir/r.npy" --workers "$@" >"$log" 2>&1; then
		status=1
		echo "  $name: FAILED: $(tail -n 3 "$log")"
		line apply "$key" "$label" "$m" "" "" "" "" "$(tail -n 3 "$log" | paste -sd'|' -)"
		rm -f "$log"
		return
	fi
	end=$(date +%s.%N)
	gbs=$(sed -n 's/.*(\([0-9.]*\) GB\/s).*/\1/p' "$log" | head -n 1)
	wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
	workers=$(grep -oE '[0-9]+ workers? \([0-9]+ cpu, [0-9]+ gpu\)' "$log" | head -n 1 || true)
	gpus=$(grep -E '^\s+worker [0-9]+ \(gpu' "$log" | sed 's/^ *//' || true)
	printf '  %-34s %8s GB/s %7s s wall  %s\n' "$name" "$gbs" "$wall" "$workers"
	if [ -n "$gpus" ]; then printf '%s\n' "$gpus" | sed 's/^/      /'; fi
	grep -E 'warning' "$log" | sed 's/^/      /' || true
	line apply "$key" "$label" "$m" "$gbs" "$wall" "$workers" "$(paste -sd'|' - <<<"$gpus" | sed 's/|/ | /g')" ""
	rm -f "$log"
}
rects() { for i in $(seq 1 "$1"); do printf -- '--mask rect:0,0,256,%d ' $((257 - i)); done; }
for file in big.raw scan.mib; do
	opts=()
	label=mib
	# shellcheck disable=SC2054 # the commas are the shapes' own
	[ "$file" = big.raw ] && opts=(--sig-shape 256,256 --dtype uint16 --nav-shape 1024,128) && label=raw
	for m in 1 4 16 64 ring; do
		if [ "$m" = ring ]; then spec="--mask ring:128,128,90,100"; else spec=$(rects "$m"); fi
		echo "$file, $m masks:"
		run cpu_only "cpu-only" "$dir/$file" "$spec" "${opts[@]}" --gpus 0
		run hybrid_auto "hybrid (--gpus auto)" "$dir/$file" "$spec" "${opts[@]}" --gpus auto
		run gpu_only "gpu-only (--cpus 0 --gpus auto)" "$dir/$file" "$spec" "${opts[@]}" --cpus 0 --gpus auto
		if [ "$m" = 1 ] || [ "$m" = 64 ]; then
			run one_gpu_worker "one GPU worker (--cpus 0 --gpus 1)" "$dir/$file" "$spec" "${opts[@]}" --cpus 0 --gpus 1
		fi
		if [ "$m" = 1 ] || [ "$m" = 16 ]; then
			# Shifted masks (descan), sub-pixel: the GPU workers build g_f on the device from
			# the native frames (copy-free feed); compare with the unshifted rows above.
			run shifted_cpu_only "shifted, cpu-only" "$dir/$file" "$spec --shift 0.5,-1.5" "${opts[@]}" --gpus 0
			run shifted_gpu_only "shifted, gpu-only" "$dir/$file" "$spec --shift 0.5,-1.5" "${opts[@]}" --cpus 0 --gpus auto
		fi
	done
done
echo "start-up, 8-frame MIB, 4 masks (wall time of the whole process):"
spec=$(rects 4)
label=tiny_mib m=4
for plan in "--gpus 0" "--gpus auto" "--gpus 1"; do
	# shellcheck disable=SC2086
	run "startup_gpus_${plan#--gpus }" "$plan" "$dir/tiny.mib" "$spec" $plan
done
exit $status
