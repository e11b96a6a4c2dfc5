# C ABI (libstemdot.so) and the Python package. Included from the top-level Makefile,
# which defines GO and BUILD.
#
#   make capi         build/libstemdot.so (+ the generated build/libstemdot.h, internal)
#   make test-capi    build and run capi/examples/apply.c against it
#   make test-python  python/.venv with numpy, pytest and ./python; run python/tests

CC          ?= cc
PYTHON      ?= python3
CAPI_LIB    := $(BUILD)/libstemdot.so
CAPI_SRC    := $(wildcard capi/*.go capi/*.c capi/*.h) include/stemdot.h
CAPI_DEPS   := $(wildcard dataset/*.go masks/*.go planner/*.go engine/*.go affinity/*.go cuda/*.go)
CAPI_EXAMPLE := $(BUILD)/capi-example
STEMDOT_TESTDATA ?= $(abspath ../shared/data)
PY_VENV     := python/.venv
# A CPU-only library leaves NVML out (tag nonvml): its symbols would stay unresolved for
# the programs linking it. A CUDA build keeps it for GPU discovery; its users link with
# --allow-shlib-undefined and load it with lazy binding (include/stemdot.h, "Linking").
CAPI_TAGS   := $(if $(TAGS),cuda,nonvml)
comma       := ,
CAPI_LDFLAGS := $(if $(TAGS),-Wl$(comma)--allow-shlib-undefined,)

.PHONY: capi test-capi test-python

capi: $(CAPI_LIB)

$(CAPI_LIB): $(CAPI_SRC) $(CAPI_DEPS) go.mod go.sum $(if $(TAGS),kernels,)
	@mkdir -p $(BUILD)
	$(GO) build -buildmode=c-shared -tags $(CAPI_TAGS) -o $@ ./capi

$(CAPI_EXAMPLE): capi/examples/apply.c include/stemdot.h $(CAPI_LIB)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o $@ $< \
		-L$(BUILD) -lstemdot -Wl,-rpath,$(abspath $(BUILD)) $(CAPI_LDFLAGS) -lpthread -lm

test-capi: $(CAPI_EXAMPLE)
	$(CAPI_EXAMPLE) $(STEMDOT_TESTDATA)/mib/001_4x2_6bit.mib

$(PY_VENV)/bin/python:
	$(PYTHON) -m venv $(PY_VENV)

# pip builds libstemdot.so into the package with `go build -buildmode=c-shared` (see
# python/setup.py); STEMDOT_LIB is left unset so that the installed library is tested.
test-python: $(PY_VENV)/bin/python build
	$(PY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PY_VENV)/bin/python -m pip install --quiet numpy pytest
	$(PY_VENV)/bin/python -m pip install --quiet --force-reinstall --no-deps ./python
	cd python && STEMDOT_TESTDATA=$(STEMDOT_TESTDATA) .venv/bin/python -m pytest -q tests
