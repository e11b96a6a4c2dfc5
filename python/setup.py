"""Build hook: compile libstemdot.so from the Go sources into the package.

When `go` is on PATH and this directory sits in the stemdot repository (../go.mod and
../capi), `build_py` runs `go build -buildmode=c-shared -o <build>/stemdot/libstemdot.so
./capi` in the repository root, so the wheel carries the library. Otherwise the package
is built without it and finds the library at import time through $STEMDOT_LIB or the
repository's build/ directory (see stemdot/_lib.py).
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
        tags = os.environ.get("STEMDOT_GO_TAGS", "")
        cmd = [go, "build", "-buildmode=c-shared", "-tags", tags, "-o", str(target), "./capi"]
        self.announce("stemdot: " + " ".join(cmd), level=3)
        subprocess.run(cmd, cwd=REPO, check=True)
        # go also writes the cgo-generated header beside it; the public one is include/stemdot.h.
        target.with_suffix(".h").unlink(missing_ok=True)


class BinaryDistribution(Distribution):
    """Tags the wheel as platform-specific: it carries a shared library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithGo}, distclass=BinaryDistribution)
