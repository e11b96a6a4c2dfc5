# `make bench` / `make bench-full`: stemdot's mask job against the streaming-read floor
# and the peers numpy and LiberTEM (CuPy on GPU machines); see bench/RESULTS.md.
#
# Two builds of bench/cmd/stemdot-bench are measured in the same run: the pure-Go one
# (gonum's blas32) and one with -tags openblas (engine/blas_openblas.go: gonum's blas32
# on Debian's OpenBLAS through cgo), when libopenblas-pthread-dev is installed (as root
# with apt-get, `make bench` installs it). It runs with OPENBLAS_NUM_THREADS=1: one BLAS
# thread per pinned worker. Debian's serial OpenBLAS (libopenblas-serial-dev, built
# without locking) gave wrong results when two workers called sgemm at once, so the
# thread-safe pthread build is linked, by path. The peers run from a venv
# in bench/.venv (pip install numpy libertem threadpoolctl); when the package index is
# unreachable they are skipped with a message. Datasets go to bench/scratch/, results
# to bench/results/latest.{json,csv,png}.
#
# bench: quick (datasets of 1 GiB per dtype, peers on all cores; a few minutes on 2
# cores). bench-full: datasets sized to the machine, peers on all cores and on one. Both
# also measure the uint16 scan as raw_csr counted frames and its first frames as gzip and
# bitshuffle-LZ4 HDF5 (stemdot-bench -only raw,sparse,hdf5 selects the parts).

BENCH_VENV := bench/.venv
BENCH_PY   := $(BENCH_VENV)/bin/python
BENCH_BIN  := $(BIN)/stemdot-bench
BENCH_OPENBLAS_BIN := $(BIN)/stemdot-bench-openblas
BENCH_OPENBLAS_DIR = $(firstword $(wildcard /usr/lib/*/openblas-pthread))

.PHONY: bench-venv bench-openblas-lib bench-build

bench-venv:
	@if $(BENCH_PY) -c 'import numpy, threadpoolctl, libertem' 2>/dev/null; then \
		echo "bench: peers' venv $(BENCH_VENV) ready"; \
	else \
		echo "bench: installing numpy, libertem and threadpoolctl into $(BENCH_VENV)"; \
		{ python3 -m venv $(BENCH_VENV) && $(BENCH_PY) -m pip install -q --disable-pip-version-check numpy libertem threadpoolctl; } \
		|| echo "bench: could not install numpy/libertem (package index unreachable?): the peers will be skipped"; \
	fi

bench-openblas-lib:
	@if [ -z "$(wildcard /usr/lib/*/openblas-pthread/libopenblas.so)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "bench: installing libopenblas-pthread-dev"; \
		apt-get install -y -q libopenblas-pthread-dev >/dev/null || echo "bench: apt-get install libopenblas-pthread-dev failed"; \
	fi

bench-build: bench-openblas-lib $(if $(TAGS),kernels,)
	$(CUDA_LINK) $(GO) build $(GOTAGS) -o $(BENCH_BIN) ./bench/cmd/stemdot-bench
	@if [ -n "$(BENCH_OPENBLAS_DIR)" ]; then \
		echo "CGO_LDFLAGS=... $(GO) build $(call gotags,openblas $(TAGS)) -o $(BENCH_OPENBLAS_BIN) ./bench/cmd/stemdot-bench"; \
		CGO_LDFLAGS="-L$(BENCH_OPENBLAS_DIR) -Wl,-rpath,$(BENCH_OPENBLAS_DIR) -lopenblas $(CUDA_LDFLAG)" \
			$(GO) build $(call gotags,openblas $(TAGS)) -o $(BENCH_OPENBLAS_BIN) ./bench/cmd/stemdot-bench; \
	else \
		echo "bench: no OpenBLAS (apt-get install libopenblas-pthread-dev): the openblas build is skipped"; \
		rm -f $(BENCH_OPENBLAS_BIN); \
	fi

bench: bench-venv bench-build
	$(BENCH_BIN) -quick -with $(BENCH_OPENBLAS_BIN)

bench-full: bench-venv bench-build
	$(BENCH_BIN) -with $(BENCH_OPENBLAS_BIN)

# bench-view: stemdot view's drag-to-image latency (mouse event to the animation frame that
# presents the new image, measured in the page) in headless Chromium, 1 disk on CPU
# workers, on a 1.07 GB synthetic scan (256×256 positions of 64×128 uint16 frames, written
# to a temporary directory, read once into the page cache, removed after): the browser test
# TestViewSynthetic with STEMDOT_VIEW_BENCH=1 prints the median, min and max of 40 moves.
# Needs Chromium (apt-get install chromium); screenshots in $STEMDOT_VIEW_SHOTS. Other
# shapes: STEMDOT_VIEW_BENCH_NAV=64,128 STEMDOT_VIEW_BENCH_SIG=256,256 make bench-view.
.PHONY: bench-view
bench-view:
	STEMDOT_VIEW_BENCH=1 $(GO) test $(GOTAGS_CPU) -count=1 -run '^TestViewSynthetic$$' -v ./cmd/stemdot

# `make bench-live`: the live receivers end to end, as a user runs them (bench/cmd/stemdot-
# livebench; a few minutes): `stemdot live` in active mode against `stemdot replay` on
# loopback, sender and receiver on the same cores — DECTRIS stream v2 and v1 of ARINA-like
# 192×192 and 96×96 (binned) uint16 bitshuffle-LZ4 frames, Merlin 256×256 12-bit raw — 4
# masks, several series each; against a receiver that only reads the socket, and against
# LiberTEM-live 0.3.0 (make py-live: its DECTRIS stream v1 and Merlin receivers,
# ApplyMasksUDF of the same masks; skipped with a message without it). Frames/s, GB/s and
# CPU seconds of receiver and sender, ratios pair by pair over the repeats; inputs in
# bench/scratch/live, figures in bench/results/live.json and a Markdown table on stdout
# (bench/RESULTS.md). Options: BENCH_LIVE_FLAGS (e.g. -repeats 5, -only merlin).
.PHONY: bench-live
bench-live: build py-live
	$(GO) build -o $(BIN)/stemdot-livebench ./bench/cmd/stemdot-livebench
	$(BIN)/stemdot-livebench -stemdot $(BIN)/stemdot -python $(PY_VENV)/bin/python $(BENCH_LIVE_FLAGS)
