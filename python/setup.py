"""Build hook: compile libstemdot.so from the Go sources into the package.

`build_py` runs `go build -buildmode=c-shared -o <build>/stemdot/libstemdot.so ./capi` in
the repository root (this directory sits in the stemdot repository: ../go.mod and
../capi), so the wheel carries the library. Without Go on PATH, or outside the
repository, the build fails with a message saying so: a package without its library
would install and then fail at its first call. A library left in the build directory by
an earlier build is removed first, so that it is never shipped in place of this one. As
the Makefile, it builds without HDF5 (-tags nohdf5) when pkg-config finds no libhdf5
1.10.5 or later, and says so.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.errors import ExecError

REPO = Path(__file__).resolve().parent.parent


class BuildPyWithGo(build_py):
    def run(self):
        target = Path(self.build_lib).resolve() / "stemdot" / "libstemdot.so"
        for stale in (target, target.with_suffix(".h")):
            stale.unlink(missing_ok=True)
        super().run()
        if not (REPO / "go.mod").is_file() or not (REPO / "capi").is_dir():
            raise ExecError(
                f"stemdot: the package is built from the stemdot repository, but {REPO} holds no go.mod and capi/: "
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
        cmd = [go, "build", "-buildmode=c-shared", "-tags", tags, "-o", str(target), "./capi"]
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


setup(cmdclass={"build_py": BuildPyWithGo}, distclass=BinaryDistribution)
