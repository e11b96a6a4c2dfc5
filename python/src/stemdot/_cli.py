"""The `stemdot` command of the installed package: the Go CLI (cmd/stemdot) that the build
put in the package as _bin/stemdot, run in place of this process (exec), so that its
signals, exit status, standard streams and terminal are the binary's own."""

import os
import sys
from pathlib import Path

BINARY = Path(__file__).resolve().parent / "_bin" / "stemdot"


def main():
    if not os.access(BINARY, os.X_OK):
        sys.exit(f"stemdot: the stemdot command {BINARY} is missing or not executable: reinstall the stemdot package")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(BINARY, [str(BINARY), *sys.argv[1:]])
