"""Ctrl-C while ``python -m stemdot.dask`` starts.

Python imports the packages of the module it runs before running it: ``stemdot`` (numpy)
and ``stemdot.dask`` (Dask and distributed), about a second before
``stemdot.dask.__main__`` can catch anything. A Ctrl-C then would end the command with a
KeyboardInterrupt traceback and the status of SIGINT. :func:`handle_interrupts` (called by
``stemdot/__init__.py`` before its first import) makes it end as the command's later
interrupts do: with its message and status 1 (as ``stemdot apply``). Only in that
command's process: while Python locates the module given to ``-m``, ``sys.argv[0]`` is
"-m", and ``sys.orig_argv`` (Python 3.10+) names the module.
"""

import os
import signal
import sys

MODULE = "stemdot.dask"
MESSAGE = "stemdot.dask: interrupted: no result written"


def _running_module():
    argv = getattr(sys, "orig_argv", [])
    for i, arg in enumerate(argv):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
    return None


def interrupted(signum, frame):
    """The SIGINT handler while the command starts: its message, status 1, at once (the
    process holds nothing yet: no connection, no output file)."""
    os.write(2, (MESSAGE + "\n").encode())
    os._exit(1)


def handle_interrupts():
    """Installs :func:`interrupted` for SIGINT in the process of ``python -m
    stemdot.dask`` while its packages are imported; stemdot.dask.__main__ puts Python's
    own handler back (KeyboardInterrupt) when it starts."""
    if sys.argv[:1] == ["-m"] and _running_module() == MODULE:
        signal.signal(signal.SIGINT, interrupted)
