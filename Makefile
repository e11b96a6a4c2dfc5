# stemdot build, demo, tests and benchmarks.
#
# `make` builds bin/stemdot with CUDA when nvcc is found (CMake builds the kernels, then
# `go build -tags cuda`), else CPU-only, and with HDF5 when pkg-config finds libhdf5
# 1.10.5 or later, else without (`-tags nohdf5`: HDF5 files are refused, naming the
# package to install), and says which. Every Go command here gets the same tags.

# The default goal is all (bin/stemdot), whatever rule is written first.
.DEFAULT_GOAL := all

GO      ?= go
NVCC    := $(shell command -v nvcc 2>/dev/null)
BUILD   := build
BIN     := bin
KERNELS := $(BUILD)/kernels/libstemdot_kernels.a
ifeq ($(strip $(NVCC)),)
  TAGS :=
  FLAVOUR := CPU-only (nvcc not found)
else
  TAGS := cuda
  FLAVOUR := with CUDA ($(NVCC))
endif
HDF5_VERSION := $(shell pkg-config --modversion hdf5 2>/dev/null)
ifeq ($(shell pkg-config --atleast-version=1.10.5 hdf5 2>/dev/null && echo ok),ok)
  NOHDF5 :=
  HDF5_FLAVOUR := with HDF5 (libhdf5 $(HDF5_VERSION))
else
  NOHDF5 := nohdf5
  HDF5_MISSING := $(if $(HDF5_VERSION),libhdf5 $(HDF5_VERSION) is older than 1.10.5,libhdf5-dev not found): apt-get install libhdf5-dev pkg-config
  HDF5_FLAVOUR := without HDF5 ($(HDF5_MISSING))
endif
# $(call gotags,TAGS) is "-tags" with TAGS and nohdf5 where HDF5 is absent, comma-separated,
# or nothing.
comma := ,
gotags = $(if $(strip $(1) $(NOHDF5)),-tags $(subst $() ,$(comma),$(strip $(1) $(NOHDF5))),)
GOTAGS := $(call gotags,$(TAGS))
GOTAGS_CPU := $(call gotags,)
# A file named after the tags, so that a file built with other tags (build/libstemdot.so)
# is built again when nvcc or libhdf5 comes or goes.
TAGS_STAMP := $(BUILD)/tags-$(subst $() ,-,$(or $(strip $(TAGS) $(NOHDF5)),none))
$(TAGS_STAMP):
	@mkdir -p $(@D) && rm -f $(BUILD)/tags-* && touch $@
# Go's build cache keys a cgo link on its flags, not on the contents of the archive they
# name: after libstemdot_kernels.a is rebuilt, go build or go test -c can hand back a binary
# linked with the old one. An unused symbol named after the archive's checksum, added to
# CGO_LDFLAGS, puts the contents into the key. $(call kernels_env,ARCHIVE) prefixes a go
# command that links ARCHIVE.
kernels_flag = -Wl,--defsym=stemdot_kernels_$(firstword $(shell cksum $(1)))=0
kernels_env = CGO_LDFLAGS="$${CGO_LDFLAGS:--O2 -g} $(call kernels_flag,$(1))"
CUDA_LINK = $(if $(TAGS),$(call kernels_env,$(KERNELS)),)
CUDA_LDFLAG = $(if $(TAGS),$(call kernels_flag,$(KERNELS)),)

.PHONY: all build install uninstall kernels kernels-emu demo test test-steps test-go test-cuda test-cuda-emu fuzz lint bench bench-full clean

all: build

build: $(if $(TAGS),kernels,)
	@echo "building stemdot $(FLAVOUR), $(HDF5_FLAVOUR)"
	$(CUDA_LINK) $(GO) build $(GOTAGS) -o $(BIN)/stemdot ./cmd/stemdot

# `make install` puts stemdot on PATH: bin/stemdot copied to $(PREFIX)/bin, by default
# ~/.local/bin as `pip install --user` does (PREFIX=/usr/local for all users; DESTDIR, as
# packagers set it, is prepended to the path written, not to the one reported), then says
# whether that directory is on PATH, and whether another stemdot comes first there. `make
# uninstall` removes it.
PREFIX ?= $(HOME)/.local
BINDIR ?= $(PREFIX)/bin
install: build
	install -d "$(DESTDIR)$(BINDIR)"
	install -m 755 $(BIN)/stemdot "$(DESTDIR)$(BINDIR)/stemdot"
	@if [ -n "$(DESTDIR)" ]; then echo "installed $(DESTDIR)$(BINDIR)/stemdot, to be $(BINDIR)/stemdot"; else \
	case ":$$PATH:" in \
	*":$(BINDIR):"*) found=$$(command -v stemdot); \
		if [ "$$found" = "$(BINDIR)/stemdot" ]; then echo "installed $(BINDIR)/stemdot: $(BINDIR) is on PATH, run stemdot"; \
		else echo "installed $(BINDIR)/stemdot: $(BINDIR) is on PATH, but $$found comes first there"; fi;; \
	*) echo "installed $(BINDIR)/stemdot: $(BINDIR) is not on PATH; add it (export PATH=\"$(BINDIR):\$$PATH\", e.g. in ~/.profile) or run $(BINDIR)/stemdot";; \
	esac; fi

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/stemdot"

kernels:
	cmake -S . -B $(BUILD)/kernels -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD)/kernels -j 2

# The kernels and their host code compiled by the host C++ compiler against the CPU
# emulator of the CUDA runtime (kernels/emu), for test-cuda-emu: no nvcc or GPU needed.
EMU_SRC := kernels/mask_dot.cu kernels/runtime.cu kernels/feed.cu kernels/shift.cu kernels/resident.cu kernels/emu/emu.cc
EMU_LIB := $(BUILD)/kernels-emu/libstemdot_kernels.a
kernels-emu: $(EMU_LIB)
$(EMU_LIB): $(EMU_SRC) $(wildcard kernels/*.cuh kernels/*.h kernels/emu/*.h)
	@mkdir -p $(@D)
	for f in $(EMU_SRC); do $(CXX) -std=c++17 -O2 -mfma -fPIC -ffp-contract=off -Wall -Wno-unknown-pragmas \
		-x c++ -Ikernels/emu -Ikernels -c $$f -o $(@D)/$$(basename $$f).o || exit 1; done
	rm -f $@ && ar rcs $@ $(patsubst %,$(@D)/%.o,$(notdir $(EMU_SRC)))

# The main job on a built-in default: a synthetic 64×64 scan of 128×128 uint16 frames,
# virtual bright field, annular dark field and centre-of-mass masks; PNGs (256×256) of
# the bright field, the dark field and the two centre-of-mass shift maps.
demo: build
	@mkdir -p out && rm -f out/demo_*.png
	$(BIN)/stemdot synth --out out/demo.mib --nav-shape 64,64 --sig-shape 128,128 --dtype uint16
	$(BIN)/stemdot apply out/demo.mib --mask disk:64,64,12 --mask ring:64,64,30,60 --mask com --out out/demo.npy \
		--com-shifts out/demo_com_shifts.npy --png out/demo
	@echo "wrote out/demo.npy (bright field, dark field, com sum and moments), out/demo_com_shifts.npy and" \
		"the PNGs out/demo_0_disk.png, out/demo_1_ring.png, out/demo_com_shift_y.png, out/demo_com_shift_x.png"

# make test runs its steps in a sub-make, then says what it left out and how long it took.
TEST_STEPS := lint test-go fuzz $(if $(TAGS),test-cuda,) test-cuda-emu test-capi test-python $(if $(NOHDF5),,test-wheel) test-libertem test-cluster
SKIPPED = $(if $(TAGS),,CUDA build tests (nvcc not found);) \
	$(if $(NOHDF5),HDF5 reader tests and the wheel (make test-wheel) ($(HDF5_MISSING));) \
	$(if $(wildcard /dev/nvidia0),,tests on a GPU (no GPU found: the kernels ran on the CPU emulator only);) \
	$(if $(wildcard $(STEMDOT_TESTDATA)/mib),,tests on real detector files ($(STEMDOT_TESTDATA) not found);) \
	$(if $(STEMDOT_CHROMIUM)$(shell command -v chromium chromium-browser google-chrome google-chrome-stable 2>/dev/null),,the browser tests of stemdot view (no Chromium: apt-get install chromium);) \
	$(if $(filter 0,$(shell id -u)),,the cluster faults that need namespaces (not root: the rig's nodes share one address);)
test:
	@start=$$(date +%s); $(MAKE) --no-print-directory test-steps; rc=$$?; s=$$(( $$(date +%s) - start )); \
	skipped="$(strip $(SKIPPED))"; if [ $$rc = 0 ]; then r=passed; else r=FAILED; fi; \
	$(PY_VENV)/bin/python -c "import libertem, sys; sys.exit(libertem.__version__ != '$(LIBERTEM_VERSION)')" 2>/dev/null || \
		skipped="$$skipped the LiberTEM conformance suite (libertem==$(LIBERTEM_VERSION) not installed: make py-libertem);"; \
	$(PY_VENV)/bin/python -c "import jupyterlab, jupyter_server_proxy, websocket" 2>/dev/null || \
		skipped="$$skipped the notebook test of stemdot.view (JupyterLab not installed: make py-jupyter);"; \
	echo "make test: $$r in $$((s / 60)) min $$((s % 60)) s$${skipped:+; skipped: $${skipped%;}}"; exit $$rc
test-steps: $(TEST_STEPS)

test-go: py-refs py-live
	$(GO) test $(GOTAGS_CPU) -race -timeout 40m ./...
	# the address-space limit tests, which the race detector's shadow memory defeats
	$(GO) test $(GOTAGS_CPU) -count=1 -timeout 40m -run 'UnderAddressSpaceLimit' ./masks .
	# the engine's AVX2 kernels, as on CPUs without AVX-512
	GODEBUG=cpu.avx512f=off $(GO) test $(GOTAGS_CPU) -count=1 -timeout 40m ./engine
	# the engine's pure-Go kernels and HDF5 filters' bit transposition, as on CPUs without AVX2+FMA
	GODEBUG=cpu.avx2=off $(GO) test $(GOTAGS_CPU) -count=1 -timeout 40m ./engine ./internal/h5filter

# Every reader's fuzz target, briefly; crashers land in testdata/fuzz. Budgets are execution
# counts (about 5-10 s each on 2 cores), not durations: a duration -fuzztime in Go 1.26 can
# fail with "context deadline exceeded" and no crasher (go.dev/issue/75804). FUZZTIME=10m (or
# 1000000x) overrides every budget for a longer search.
FUZZ_TARGETS ?= dataset/mib:FuzzMIBHeader:150000 dataset/blo:FuzzBLOHeader:150000 dataset/mib:FuzzHdr:4000 dataset/empad:FuzzEMPADXML:40000 \
	dataset/npy:FuzzNPY:40000 dataset/raw:FuzzRaw:15000 dataset:FuzzOpen:1500 masks:FuzzLoadNPY:4000 \
	internal/npy:FuzzRead:100000 internal/npy:FuzzReadArray:50000 dataset:FuzzROIFile:3000 dataset/mrc:FuzzMRCHeader:100000 \
	dataset/mrc:FuzzMRCOpen:4000 dataset/tvips:FuzzTVIPSHeader:100000 dataset/tvips:FuzzTVIPSOpen:2000 \
	dataset/seq:FuzzSEQ:3000 dataset/k2is:FuzzK2ISSync:60000 dataset/frms6:FuzzFRMS6HDR:100000 dataset/frms6:FuzzFRMS6Header:200000 \
	dataset/frms6:FuzzFRMS6GainMAT:60000 dataset/dm:FuzzOpenDM:10000 dataset/ser:FuzzOpenSER:6000 \
	internal/h5filter:FuzzDecode:80000 internal/h5filter:FuzzChecksums:20000 internal/h5index:FuzzRead:50000 dataset/csr:FuzzCSR:3000 dataset/stempy:FuzzMapRows:50000 \
	cmd/libstemdot:FuzzSizes:10000
fuzz:
	for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest#*:}; \
		$(GO) test $(GOTAGS_CPU) ./$$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $${FUZZTIME:-$${n}x} || exit 1; done

test-cuda: kernels
	$(GO) vet $(call gotags,cuda) ./...
	$(CUDA_LINK) $(GO) test $(call gotags,cuda) -timeout 40m ./...

# The GPU tests on the emulated device (kernels-emu): package cuda's, and those of the
# packages that use it (GPU workers, resident datasets, the CLI's --gpus).
EMU_PKGS := ./cuda ./engine . ./cmd/stemdot
test-cuda-emu: kernels-emu
	$(GO) vet $(call gotags,cuda cudaemu) $(EMU_PKGS)
	$(call kernels_env,$(EMU_LIB)) $(GO) test $(call gotags,cuda cudaemu) -count=1 -timeout 40m $(EMU_PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(GOTAGS_CPU) ./...

clean:
	rm -rf $(BIN) $(BUILD) out

include mk/capi.mk mk/wheel.mk mk/bench.mk
