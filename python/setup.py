"""Build hook: compile libstemdot.so from the Go sources into the package.

When `go` is on PATH and this directory sits in the stemdot repository (../go.mod and
../capi), `build_py` runs `go build -buildmode=c-shared -o <build>/stemdot/libstemdot.so
./capi` in the repository root, so the wheel carries the library. Otherwise the package
is built without it and finds the library at import time through $STEMDOT_LIB or the
repository's build/ directory (see stemdot/_lib.py). As the Makefile, it builds without
HDF5 (-tags nohdf5) when pkg-config finds no libhdf5 1.10.5 or later, and says so.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

REPO = Path(__file__).resolve().parent.parent


class BuildPyWithGo(build_py):
    def run(self):
        super().run()
        go = shutil.which("go")
        if go is None or not (REPO / "go.mod").is_file() or not (REPO / "capi").is_dir():
            self.announce(
                "stemdot: Go or the repository sources not found: libstemdot.so not built; "
                "set STEMDOT_LIB or run `make capi` in the repository",
                level=3,
            )
            return
        target = Path(self.build_lib).resolve() / "stemdot" / "libstemdot.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        # CPU-only by default; STEMDOT_GO_TAGS=cuda builds a CUDA library (after `make kernels`).
        tags = self.hdf5_tags(os.environ.get("STEMDOT_GO_TAGS", ""))
        cmd = [go, "build", "-buildmode=c-shared", "-tags", tags, "-o", str(target), "./capi"]
        self.announce("stemdot: " + " ".join(cmd), level=3)
        subprocess.run(cmd, cwd=REPO, check=True)
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
