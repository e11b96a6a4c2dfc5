# C ABI (libstemdot.so) and the Python package. Included from the top-level Makefile,
# which defines GO and BUILD.
#
#   make capi         build/libstemdot.so (+ the generated build/libstemdot.h, internal)
#   make test-capi    build and run cmd/libstemdot/examples/apply.c, cmd/libstemdot/examples/fork.c (a
#                     forked child is refused, not hung) and cmd/libstemdot/examples/live.c (live
#                     runs from a Merlin sender on loopback) against it, and the C program
#                     of doc/c-and-python.md compiled with its link line, as written
#   make python-venv  python/.venv with numpy, pytest, dask[distributed] and ./python
#   make test-python  python-venv, then run python/tests (stemdot.dask's on a LocalCluster)
#   make py-hyperspy  HyperSpy (>=2) and pyxem into python/.venv, for python/tests/test_lazy.py
#                     (skipped with a message where PyPI cannot be reached: those tests skip)
#   make py-jupyter   JupyterLab, jupyter-server-proxy and websocket-client into python/.venv,
#                     for the notebook test of stemdot.view in headless Chromium (skipped
#                     with a message where PyPI cannot be reached: that test then skips)
#   make py-libertem  libertem==0.16.0 into python/.venv (skipped with a message where PyPI
#                     cannot be reached: the conformance suite then skips)
#   make py-live      the detector simulators of libertem-live[sim]==0.3.0 and DECTRIS's own
#                     codec (dectris-compression, cbor2, lz4) into python/.venv, for the
#                     live receivers' tests (skipped with a message where PyPI cannot be reached)
#   make test-libertem the LiberTEM conformance suite, python/tests/conformance: the same
#                     inputs through LiberTEM and stemdot (doc/libertem.md, "Differences from LiberTEM")
#   make test-cluster stemdot.dask's fault tests on a rig of nodes, each in its own network and
#                     mount namespace (cluster/rig.py; one address without root), real
#                     dask scheduler/worker commands; prints fault | result identical | time
#   make bench-dask   one process vs 1, 2, 3 one-core nodes of the rig (bench/dask)

CC          ?= cc
PYTHON      ?= python3
CAPI_LIB    := $(BUILD)/libstemdot.so
CAPI_SRC    := $(wildcard cmd/libstemdot/*.go cmd/libstemdot/*.c cmd/libstemdot/*.h) include/stemdot.h
# Every package the library may link, e.g. dataset/hdf5 (bench/ and cmd/stemdot hold none).
# (the viewer's page is embedded: stemdot_view_start serves it)
CAPI_DEPS   := $(filter-out %_test.go bench/% cmd/stemdot/%,$(wildcard *.go */*.go */*/*.go */*/*/*.go)) \
	$(shell find cmd/internal/view/static -type f)
CAPI_EXAMPLE := $(BUILD)/capi-example
CAPI_FORK   := $(BUILD)/capi-fork
CAPI_LIVE   := $(BUILD)/capi-live
STEMDOT_TESTDATA ?= $(abspath ../shared/data)
PY_VENV     := python/.venv
# The C program and link line of doc/c-and-python.md (C_DOC), run as written in
# $(C_DOC_DIR)/app, a directory outside the repository beside shared/data, with STEMDOT set
# to the repository root.
C_DOC       := doc/c-and-python.md
C_DOC_DIR   := $(BUILD)/doc-c

.PHONY: capi test-capi python-venv py-refs py-hyperspy py-jupyter py-libertem py-live test-python test-libertem test-cluster bench-dask

capi: $(CAPI_LIB)

$(CAPI_LIB): $(CAPI_SRC) $(CAPI_DEPS) go.mod go.sum $(TAGS_STAMP) $(if $(TAGS),kernels,)
	@mkdir -p $(BUILD)
	$(CUDA_LINK) $(GO) build -buildmode=c-shared $(GOTAGS) -o $@ ./cmd/libstemdot

$(CAPI_EXAMPLE): cmd/libstemdot/examples/apply.c include/stemdot.h $(CAPI_LIB)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o $@ $< \
		-L$(BUILD) -lstemdot -Wl,-rpath,$(abspath $(BUILD)) -lpthread -lm

$(CAPI_FORK): cmd/libstemdot/examples/fork.c include/stemdot.h $(CAPI_LIB)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o $@ $< \
		-L$(BUILD) -lstemdot -Wl,-rpath,$(abspath $(BUILD))

$(CAPI_LIVE): cmd/libstemdot/examples/live.c include/stemdot.h $(CAPI_LIB)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o $@ $< \
		-L$(BUILD) -lstemdot -Wl,-rpath,$(abspath $(BUILD)) -lpthread -lm

test-capi: $(CAPI_EXAMPLE) $(CAPI_FORK) $(CAPI_LIVE)
	$(CAPI_EXAMPLE) $(STEMDOT_TESTDATA)/mib/001_4x2_6bit.mib
	$(CAPI_FORK)
	$(CAPI_LIVE) $(STEMDOT_TESTDATA)/mib/Single_9_Frame_CounterDepth_12_Rows_256.mib
	@rm -rf $(C_DOC_DIR) && mkdir -p $(C_DOC_DIR)/app
	awk '/^```c$$/ {c = 1; next} /^```/ {c = 0} c' $(C_DOC) > $(C_DOC_DIR)/app/app.c
	grep -m1 '^cc -I"$$STEMDOT/include" app.c' $(C_DOC) > $(C_DOC_DIR)/app/link.sh
	@test -s $(C_DOC_DIR)/app/app.c && test -s $(C_DOC_DIR)/app/link.sh || { echo "$(C_DOC): C program or link line not found"; exit 1; }
	cd $(C_DOC_DIR)/app && STEMDOT=$(abspath .) sh -ex link.sh
	@# the program reads ../shared/data from its directory: give it that layout
	@if [ -f $(STEMDOT_TESTDATA)/mib/001_4x2_6bit.mib ]; then \
		mkdir -p $(C_DOC_DIR)/shared && ln -s $(STEMDOT_TESTDATA) $(C_DOC_DIR)/shared/data && \
		cd $(C_DOC_DIR)/app && ./a.out; \
	else echo "test-capi: $(STEMDOT_TESTDATA) absent: the C program of $(C_DOC) was compiled, not run"; fi

$(PY_VENV)/bin/python:
	$(PYTHON) -m venv $(PY_VENV)

# pip builds libstemdot.so into the package with `go build -buildmode=c-shared` (see
# python/setup.py); STEMDOT_LIB is left unset so that the installed library is tested.
python-venv: $(PY_VENV)/bin/python
	$(PY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PY_VENV)/bin/python -m pip install --quiet numpy pytest "dask[distributed]"
	$(PY_VENV)/bin/python -m pip install --quiet --force-reinstall --no-deps ./python

# The independent decoders that Go tests of the readers run (testfiles.Python): numpy,
# h5py, and hdf5plugin's filters (bitshuffle, LZ4, ...).
py-refs: $(PY_VENV)/bin/python
	$(PY_VENV)/bin/python -m pip install --quiet numpy h5py hdf5plugin

# HyperSpy and pyxem for the tests of their signals, lazy or not (python/tests/test_lazy.py);
# kept without asking PyPI once installed. Where PyPI cannot be reached (or pip fails), a
# message says so and those tests skip, naming this target.
py-hyperspy: python-venv
	@if $(PY_VENV)/bin/python -c "import sys, importlib.metadata as m; import pyxem; sys.exit(int(m.version('hyperspy').split('.')[0]) < 2)" 2>/dev/null; then :; \
	elif $(PY_VENV)/bin/python -m pip install --quiet --retries 1 --timeout 30 "hyperspy>=2" pyxem; then :; \
	else echo "py-hyperspy: hyperspy>=2 and pyxem could not be installed (PyPI unreachable?): the tests of HyperSpy and pyxem signals skip"; fi

# stemdot.view's notebook test (python/tests/test_view_notebook.py) runs JupyterLab from the venv
# and drives Chromium through the DevTools protocol (websocket-client); the proxied view
# goes through jupyter-server-proxy. Installed ones are kept without asking PyPI.
py-jupyter: python-venv
	@if $(PY_VENV)/bin/python -c "import jupyterlab, jupyter_server_proxy, websocket" 2>/dev/null; then :; \
	elif $(PY_VENV)/bin/python -m pip install --quiet --retries 1 --timeout 30 "jupyterlab>=4,<5" "jupyter-server-proxy>=4" "websocket-client>=1"; then :; \
	else echo "py-jupyter: jupyterlab could not be installed (PyPI unreachable?): the notebook test of stemdot.view skips"; fi

test-python: python-venv py-hyperspy py-jupyter build
	cd python && STEMDOT_TESTDATA=$(STEMDOT_TESTDATA) .venv/bin/python -m pytest -q tests --ignore=tests/conformance

# LiberTEM for the conformance suite. Its dependencies leave python-venv's numpy, dask and
# distributed as they are (libertem 0.16.0 asks for dask!=2023.6.1 and distributed>=2.19);
# an installed libertem==0.16.0 is kept without asking PyPI. Where PyPI cannot be reached
# (or pip fails), a message says so and the suite skips, naming this target.
LIBERTEM_VERSION := 0.16.0
py-libertem: python-venv py-refs
	@if $(PY_VENV)/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('libertem') != '$(LIBERTEM_VERSION)')" 2>/dev/null; then :; \
	elif $(PY_VENV)/bin/python -m pip install --quiet --retries 1 --timeout 30 "libertem==$(LIBERTEM_VERSION)"; then :; \
	else echo "py-libertem: libertem==$(LIBERTEM_VERSION) could not be installed (PyPI unreachable?): the LiberTEM conformance suite skips"; fi

# The independent peers of the live receivers' tests (live/merlin, live/dectris,
# cmd/stemdot's live tests): LiberTEM-live's Merlin and DECTRIS simulators, and a stream
# v2 sender built from DECTRIS's specs with cbor2, lz4 and dectris-compression. The tests
# skip with a message where they are missing.
LIBERTEM_LIVE_VERSION := 0.3.0
py-live: py-libertem
	@if $(PY_VENV)/bin/python -c "import importlib.metadata as m, sys, cbor2, lz4, dectris.compression; sys.exit(m.version('libertem-live') != '$(LIBERTEM_LIVE_VERSION)')" 2>/dev/null; then :; \
	elif $(PY_VENV)/bin/python -m pip install --quiet --retries 1 --timeout 30 "libertem==$(LIBERTEM_VERSION)" "libertem-live[sim]==$(LIBERTEM_LIVE_VERSION)" cbor2 lz4 dectris-compression; then :; \
	else echo "py-live: libertem-live[sim]==$(LIBERTEM_LIVE_VERSION) could not be installed (PyPI unreachable?): the tests against its simulators skip"; fi

# LiberTEM's numba kernels are cached in $(PY_VENV)/numba-cache (conformance/conftest.py).
test-libertem: py-libertem build
	cd python && STEMDOT_TESTDATA=$(STEMDOT_TESTDATA) .venv/bin/python -m pytest -q -rfEs tests/conformance

# The cluster rig's fault tests, bounded: SIGTERM after CLUSTER_TIMEOUT s (the rig then
# stops every process it started and deletes its namespaces), SIGKILL 30 s later.
CLUSTER_TIMEOUT ?= 480
test-cluster: python-venv py-refs
	cd cluster && timeout --kill-after=30 $(CLUSTER_TIMEOUT) ../$(PY_VENV)/bin/python -m pytest -q -p no:cacheprovider .

# A 4 GiB scan in bench/scratch/ and 128 masks, results in bench/results/dask.json.
bench-dask: python-venv
	$(PY_VENV)/bin/python bench/dask/bench.py
