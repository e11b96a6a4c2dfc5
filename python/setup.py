"""Build hook: compile libstemdot.so and the stemdot command from the Go sources into the
package.

`build_py` runs `go build -buildmode=c-shared -o <build>/stemdot/libstemdot.so ./cmd/libstemdot` and
`go build -o <build>/stemdot/_bin/stemdot ./cmd/stemdot` in the repository root (this
directory sits in the stemdot repository: ../go.mod and ../cmd/libstemdot), so the wheel carries the
library and the CLI, which the console script `stemdot` (stemdot._cli) runs. Without Go
on PATH, or outside the repository, the build fails with a message saying so: a package
without its library would install and then fail at its first call. Files left in the
build directory by an earlier build are removed first, so that they are never shipped in
place of these. As the Makefile, it builds without HDF5 (-tags nohdf5) when pkg-config
finds no libhdf5 1.10.5 or later, and says so. The wheel is tagged py3-none-PLATFORM:
it holds no extension module, only ctypes bindings, so one wheel serves every Python 3.
`make wheel` makes it a manylinux wheel with libhdf5 bundled (auditwheel repair).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.errors import ExecError

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's, where it is installed
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # no wheel can be built (setup.py build_py, say)
        bdist_wheel = None

REPO = Path(__file__).resolve().parent.parent


class BuildPyWithGo(build_py):
    def run(self):
        target = Path(self.build_lib).resolve() / "stemdot" / "libstemdot.so"
        cli = target.parent / "_bin" / "stemdot"
        for stale in (target, target.with_suffix(".h"), cli):
            stale.unlink(missing_ok=True)
        super().run()
        if not (REPO / "go.mod").is_file() or not (REPO / "cmd" / "libstemdot").is_dir():
            raise ExecError(
                f"stemdot: the package is built from the stemdot repository, but {REPO} holds no go.mod and cmd/libstemdot/: "
                "install it from a checkout (pip install ./python in the repository root)"
            )
        go = shutil.which("go")
        if go is None:
            raise ExecError(
                "stemdot: building the package needs Go (the go command, version 1.26 or newer; "
                "https://go.dev/dl/), which is not on PATH: install Go, put its bin directory on PATH "
                "(e.g. export PATH=$PATH:/usr/local/go/bin) and install again"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        # CPU-only by default; STEMDOT_GO_TAGS=cuda builds a CUDA library (after `make kernels`).
        tags = self.hdf5_tags(os.environ.get("STEMDOT_GO_TAGS", ""))
        # -s -w: without the symbol table and DWARF (a quarter smaller); panics still name
        # functions and lines (Go's own pclntab stays).
        flags = ["-tags", tags, "-ldflags=-s -w"]
        for cmd in ([go, "build", "-buildmode=c-shared", *flags, "-o", str(target), "./cmd/libstemdot"],
                    [go, "build", *flags, "-o", str(cli), "./cmd/stemdot"]):
            self.announce("stemdot: " + " ".join(cmd), level=3)
            if subprocess.run(cmd, cwd=REPO).returncode != 0:
                raise ExecError(f"stemdot: {' '.join(cmd)} failed in {REPO} (its messages are above)")
        # go also writes the cgo-generated header beside it; the public one is include/stemdot.h.
        target.with_suffix(".h").unlink(missing_ok=True)


    def hdf5_tags(self, tags):
        """tags with nohdf5 added when pkg-config finds no libhdf5 1.10.5 or later."""
        if "nohdf5" in tags.replace(",", " ").split():
            return tags
        try:
            found = subprocess.run(["pkg-config", "--atleast-version=1.10.5", "hdf5"]).returncode == 0
        except OSError:
            found = False
        if found:
            return tags
        self.announce(
            "stemdot: libhdf5 1.10.5 or later not found by pkg-config: building without HDF5 "
            "(apt-get install libhdf5-dev pkg-config to read HDF5 files)",
            level=3,
        )
        return ",".join(t for t in (tags, "nohdf5") if t)


class BinaryDistribution(Distribution):
    """Tags the wheel as platform-specific: it carries a shared library."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithGo}
if bdist_wheel is not None:

    class BdistWheelPy3(bdist_wheel):
        """Tags the wheel py3-none-PLATFORM (not cpXY-cpXY-PLATFORM): its Go code is loaded
        with ctypes and run as a command, never imported as an extension module."""

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = BdistWheelPy3

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
