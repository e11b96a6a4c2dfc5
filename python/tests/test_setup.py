"""The package's build step (setup.py, run by pip install ./python)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]


def test_build_without_go_fails_naming_go_and_removes_a_stale_library(tmp_path):
    """Without go on PATH the build fails with a message naming Go and where to get it
    (it built a package without its library before), and a library an earlier build left
    in the build directory is removed, never shipped."""
    build = tmp_path / "build"
    stale = build / "stemdot" / "libstemdot.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an earlier build's library")
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "go").exists())
    assert shutil.which("go", path=path) is None
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)], cwd=PYTHON_DIR,
                         env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0, run.stdout + run.stderr
    assert "building the package needs Go" in run.stderr and "https://go.dev/dl/" in run.stderr, run.stderr
    assert not stale.exists()
