#!/usr/bin/env bash
# make test-wheel: install the wheel of make wheel as a user would, in a fresh venv, with
# no go on PATH and binary packages only (nothing may compile; with pytest, and h5py and
# hdf5plugin, the tests' reference readers), then check that libhdf5
# and its libraries resolve inside the installed package (ldd, LD_LIBRARY_PATH removed),
# that `stemdot` on PATH is the package's command, and run the Python tests against the
# installed package and its command (STEMDOT_CLI; the build and Dask tests left out).
#
#   scripts/test-wheel.sh WHEEL VENV PYTHON TESTDATA
set -euo pipefail
wheel=$(realpath "$1") venv=$(realpath -m "$2") python=$(command -v "$3") testdata=$4
repo=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "test-wheel: $*" >&2; exit 1; }

# PATH without go: every directory holding a go command left out.
nogo=
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do [ -x "$d/go" ] || nogo=${nogo:+$nogo:}$d; done
export PATH=$venv/bin:$nogo
unset LD_LIBRARY_PATH STEMDOT_LIB STEMDOT_CLI PYTHONPATH
! command -v go >/dev/null || fail "go is still on PATH ($(command -v go))"

"$python" -m venv --clear "$venv"
"$venv/bin/python" -m pip install --quiet --only-binary :all: "$wheel" pytest h5py hdf5plugin

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT && cd "$tmp" # nowhere near python/src
[ "$("$venv/bin/python" -c 'import stemdot; print(stemdot.__file__)')" = "$site/stemdot/__init__.py" ] ||
	fail "import stemdot does not import the installed package in $site"
[ "$(command -v stemdot)" = "$venv/bin/stemdot" ] || fail "stemdot on PATH is $(command -v stemdot), not $venv/bin/stemdot"

# Every library resolves; libhdf5 to the wheel's copy.
for elf in "$site/stemdot/libstemdot.so" "$site/stemdot/_bin/stemdot"; do
	deps=$(ldd "$elf")
	! grep -q "not found" <<<"$deps" || fail "$elf: libraries not found: $deps"
	hdf5=$(realpath -e "$(awk '$1 ~ /^libhdf5/ {print $3}' <<<"$deps")") || fail "$elf: no libhdf5 in $deps"
	[ "$(dirname "$hdf5")" = "$site/stemdot.libs" ] || fail "$elf: libhdf5 is $hdf5, not the wheel's own"
	echo "test-wheel: ${elf#"$site/"} loads $hdf5"
done
stemdot --version
# Where a mount namespace can be made (root): the system's libhdf5 hidden, as on a machine
# without it, the command and the package still read HDF5.
h5=$(ldconfig -p 2>/dev/null | awk '$1 ~ /^libhdf5/ {print $NF}' | xargs -r realpath | sort -u | xargs)
if [ -n "$h5" ] && unshare -m true 2>/dev/null; then
	python -c 'import h5py, numpy; h5py.File("s.h5", "w")["d"] = numpy.arange(120, dtype="u2").reshape(2, 3, 4, 5)'
	unshare -m sh -ec 'for f in $0; do mount --bind /dev/null "$f"; done
		stemdot info s.h5 | grep -q "nav_shape:  (2, 3)"
		python -c "import stemdot; assert stemdot.reduce(\"s.h5\", (\"sum\",))[\"sum\"].sum() == 119 * 120 / 2"' "$h5" ||
		fail "with the system's libhdf5 hidden ($h5), the wheel cannot read HDF5"
	echo "test-wheel: with the system's libhdf5 hidden ($h5), the command and the package read HDF5"
else
	echo "test-wheel: no mount namespace (not root?) or no system libhdf5: the run with the system's libhdf5 hidden is left out"
fi

STEMDOT_TESTDATA=$testdata STEMDOT_CLI=$venv/bin/stemdot "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
	--rootdir "$repo/python" "$repo/python/tests" --ignore "$repo/python/tests/conformance" \
	--ignore "$repo/python/tests/test_setup.py" --ignore-glob "$repo/python/tests/test_dask*.py"
