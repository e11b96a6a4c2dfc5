"""python -m stemdot.dask: apply masks to a 4D-STEM file on a Dask cluster, or reduce its
frames (sum, mean, maximum, standard deviation), as ``stemdot apply`` and ``stemdot sum``.

    python -m stemdot.dask --scheduler tcp://head:8786 /shared/scan.mib \\
        --mask disk:128,128,20 --mask com --out result.npy
    python -m stemdot.dask --scheduler tcp://head:8786 /shared/scan.mib \\
        --sum --out sum.npy --mean mean.npy --max max.npy --std std.npy

Without masks, --sum (the sum frame to --out), --mean, --max and --std reduce every frame
(stemdot.dask.reduce) and write each frame asked as NPY of shape (sig_y, sig_x), float64.

The file is read by the workers at the given path (shared storage); the result, an NPY
array of shape nav_shape + (n_masks,), and its JSON sidecar RESULT.json naming the
columns (the schema stemdot apply writes: stemdot.Result.info; the plan's workers are
those of all the cluster's nodes) are written by this process under temporary names,
flushed to the disk and renamed when both are complete, as stemdot's own outputs are (Go
package internal/atomicfile: the temporary is .NAME.PID.NNN.tmp, locked while written;
one left by a killed writer is removed by the next write of NAME). The output directory
is checked before the run. As ``stemdot apply``: the dataset's options take the same
values (sizes with units such as ``--offset 1KiB``: the library parses them, before the
cluster is contacted), the dataset's warnings are printed ("stemdot.dask: warning: ..."),
messages name the flag that helps, and errors (a bad flag value included, one line, no
usage) and Ctrl-C (from the moment the command starts: see stemdot._startup) exit with
status 1, leaving no result file.
"""

import argparse
import errno
import fcntl
import json
import os
import random
import re
import signal
import sys
import warnings

import numpy as np

import stemdot
import stemdot.dask as sdask
from stemdot import _startup

# The options of stemdot.open this command takes, as flags: their values go to the
# library as given (it parses them as stemdot apply's flags).
OPEN_KEYS = ("format", "nav_shape", "sig_shape", "dtype", "byte_order", "offset", "frame_header", "frame_footer",
             "sync_offset", "roi", "frames", "flyback", "dataset_path", "allow_fill")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """A bad command line: one line and status 1, as stemdot apply (argparse prints
        the usage and exits 2)."""
        message = re.sub(r"^argument ([^:]+): ", lambda m: m[1].split("/")[-1] + ": ", message)
        self.exit(1, f"stemdot.dask: {message} (see {self.prog} --help)\n")


def _parser():
    p = _Parser(
        prog="python -m stemdot.dask",
        description="Apply a mask stack to every frame of FILE on the workers of a Dask cluster "
        "(dask scheduler + dask worker --nthreads 1 on every node); writes nav_shape + (n_masks,) as NPY. "
        "Without masks, --sum, --mean, --max and --std reduce every frame instead (as stemdot sum), "
        "each frame written as NPY of shape (sig_y, sig_x), float64.",
    )
    p.add_argument("file", metavar="FILE", help="4D-STEM file (MIB, NPY, raw, BLO, HDF5, EMPAD XML) at a path every worker can read")
    p.add_argument("--scheduler", required=True, metavar="ADDRESS", help="the scheduler, e.g. tcp://head:8786")
    p.add_argument("--mask", action="append", default=[], metavar="SPEC",
                   help="disk:CX,CY,R  ring:CX,CY,RI,RO  point:X,Y  rect:X,Y,W,H  com  com:CX,CY[,R] (repeatable)")
    p.add_argument("--masks", action="append", default=[], metavar="NPY",
                   help="an NPY mask stack (n_masks, sig_y, sig_x) or one mask (sig_y, sig_x), read here (repeatable); "
                   "the stacks of --masks come first, then the --mask specs, in the order given (as stemdot apply)")
    p.add_argument("--out", metavar="NPY", help="result file (NPY, float32 unless --float64); with --sum, the sum frame")
    p.add_argument("--sum", action="store_true", help="without masks: write the sum frame Σ_f frame_f to --out")
    p.add_argument("--mean", metavar="NPY", help="without masks: also the mean frame")
    p.add_argument("--max", metavar="NPY", help="without masks: also the maximum frame")
    p.add_argument("--std", metavar="NPY",
                   help="without masks: also the standard-deviation frame (ddof 0, as LiberTEM's StdDevUDF)")
    p.add_argument("--float64", action="store_true", help="accumulate and write float64")
    p.add_argument("--shift", metavar="DY,DX",
                   help="move every mask by DY,DX pixels (descan compensation; positive DY: down, DX: right; sub-pixel by bilinear interpolation)")
    p.add_argument("--shifts", metavar="NPY",
                   help="move the masks of each scan position by its own shift: NPY of nav_shape + (2,), y then x, float32 or float64 (read here, on the client), e.g. from stemdot descan fit")
    p.add_argument("--format", help="file format: a name of the README's format table, e.g. mib, hdf5, dectris, dm, ser, mrc, tvips, raw (default: detected)")
    p.add_argument("--nav-shape", metavar="Y,X",
                   help="scan shape (overrides the file's when it has as many positions, or as many as the file has frames)")
    p.add_argument("--sig-shape", metavar="Y,X", help="frame shape of a raw file")
    p.add_argument("--dtype", help="pixel dtype of a raw file (uint16, float32, ...)")
    p.add_argument("--byte-order", metavar="little|big", help="byte order of a raw file")
    p.add_argument("--offset", metavar="BYTES", help="header bytes to skip in a raw file, e.g. 1024 or 1KiB")
    p.add_argument("--frame-header", metavar="BYTES", help="bytes before every frame's pixels (raw), e.g. 384 or 1KiB")
    p.add_argument("--frame-footer", metavar="BYTES", help="bytes after every frame's pixels (raw)")
    p.add_argument("--sync-offset", metavar="N",
                   help="scan position p reads the file's frame p+N (N>0 skips leading frames, N<0 inserts blank ones)")
    p.add_argument("--roi", metavar="SPEC",
                   help="region of interest: only these scan positions are read: rect:X,Y,W,H (scan columns X..X+W-1, "
                   "rows Y..Y+H-1) or an NPY file of booleans of the scan's nav shape; the result keeps the nav shape, "
                   "NaN outside the ROI (as stemdot apply)")
    p.add_argument("--roi-compact", action="store_true",
                   help="with --roi: write only the selected positions, (n_selected, n_masks), and their flat indices "
                   "as RESULT_positions.npy beside (int64, C order over the nav shape)")
    p.add_argument("--frames", metavar="FIRST,COUNT",
                   help="only frames FIRST..FIRST+COUNT-1 of the scan (scan order, after --nav-shape and --sync-offset; "
                   "of the positions --roi selects when given), written as a scan of nav shape (COUNT,)")
    p.add_argument("--flyback", metavar="WHERE",
                   help="flyback frames of each scan row: start, end, start:N, end:N, none or auto (default: one per row "
                   "when the file holds (nav_x+1)*nav_y frames: where the frame headers set it apart in every row, "
                   "else at the end of each row of a scan of 3 or more rows)")
    p.add_argument("--dataset-path", metavar="PATH", help="HDF5: the dataset holding the frames")
    p.add_argument("--allow-fill", action="store_true", default=None,
                   help="HDF5: read storage that is missing or was never written as the fill value, with a warning")
    p.add_argument("--range-frames", type=int, metavar="N",
                   help="frames per stemdot worker in one task (default: 32 MiB of frames)")
    p.add_argument("--resources", metavar="NAME=N", action="append", default=[],
                   help="Dask resources every task needs, e.g. GPU=1 for GPU nodes only (repeatable)")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for the scheduler and the workers' set-up (default 120)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _shifts(args):
    """The shifts of --shift DY,DX or --shifts FILE.npy (as stemdot apply takes them), or
    None; SystemExit with a message naming the flag."""
    if args.shift is not None and args.shifts is not None:
        raise SystemExit("stemdot.dask: --shift and --shifts are both given: give one (a constant shift, or a file of one per scan position)")
    if args.shift is not None:
        parts = args.shift.split(",")
        try:
            if len(parts) != 2:
                raise ValueError
            return tuple(float(v) for v in parts)
        except ValueError:
            raise SystemExit(f"stemdot.dask: --shift {args.shift!r}: want DY,DX in pixels, e.g. 1.5,-2") from None
    if args.shifts is not None:
        try:
            shifts = np.load(args.shifts, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SystemExit(f"stemdot.dask: --shifts {args.shifts}: {e}") from None
        if shifts.dtype not in (np.float32, np.float64) or shifts.ndim < 2 or shifts.shape[-1] != 2:
            raise SystemExit(f"stemdot.dask: --shifts {args.shifts} has dtype {shifts.dtype} and shape {shifts.shape}: "
                             "want float32 or float64 of shape nav_shape + (2,)")
        return shifts
    return None


def _resources(items):
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise SystemExit(f"stemdot.dask: --resources {item!r}: want NAME=N, e.g. GPU=1")
    return out


def _flag_names(parser, msg):
    """msg with the options it names ("give option nav_shape") as this command's flags
    ("give --nav-shape"), as stemdot apply writes its messages."""
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}
    return re.sub(r"\boption ([a-z][a-z0-9_]*)\b", lambda m: flags.get(m.group(1), m.group(0)), msg)


def _check_empty(parser, args):
    """Refuses a flag given an empty (or blank) value, as stemdot apply does: the
    library would read most of them as not given."""
    for a in parser._actions:
        value = getattr(args, a.dest, None)
        if a.option_strings and any(isinstance(v, str) and not v.strip() for v in (value if isinstance(value, list) else [value])):
            raise SystemExit(f"stemdot.dask: {a.option_strings[-1]} is given an empty value: give a value (see {parser.prog} --help)")


def _check_options(parser, options):
    """Checks the dataset options' values with the library's parser, that of stemdot
    apply's flags, before the cluster is contacted: stemdot.open on /dev/null parses
    them, then refuses the device; an error naming an option is a value's."""
    try:
        stemdot._open(os.devnull, options).close()
    except stemdot.StemdotError as e:
        if str(e).startswith("option "):
            raise SystemExit(f"stemdot.dask: {_flag_names(parser, str(e))}") from None


def _inputs(args):
    """The files the run reads, which no output may replace: FILE, a MIB file's .hdr, the
    --masks files, the --shifts file and an --roi file (as stemdot apply's)."""
    roi = args.roi if args.roi is not None and not args.roi.startswith(("rect:", "bits:")) else None
    return [args.file, os.path.splitext(args.file)[0] + ".hdr", *args.masks, args.shifts, roi]


def _is_input(path, inputs):
    """Whether path is one of inputs (compared where both exist here: FILE may exist only
    on the workers' shared storage)."""
    for f in inputs:
        try:
            if f is not None and os.path.exists(f) and os.path.exists(path) and os.path.samefile(path, f):
                return True
        except OSError:
            pass
    return False


def _check_out(out, inputs, flag="--out"):
    name = os.path.basename(out)
    if name.lower() == ".npy":
        example = "result.npy" if flag == "--out" else flag.lstrip("-") + ".npy"
        raise SystemExit(f"stemdot.dask: {flag} {out}: the file name is only the extension (a hidden file named {name}): "
                         f"give a name, e.g. {os.path.join(os.path.dirname(out), example)}")
    if os.path.splitext(out)[1].lower() != ".npy":
        raise SystemExit(f"stemdot.dask: {flag} {out}: results are written as NPY: give a path ending in .npy")
    out = os.path.abspath(out)
    if _is_input(out, inputs):
        raise SystemExit(f"stemdot.dask: {flag} {out} is an input of this run: not replacing it")
    if os.path.exists(out) and not os.path.isfile(out):
        raise SystemExit(f"stemdot.dask: {flag} {out} is not a regular file")
    if not os.path.isdir(os.path.dirname(out)):
        raise SystemExit(f"stemdot.dask: {flag} {out}: directory {os.path.dirname(out)} does not exist")
    try:  # the write's own first step, before the run
        fd, tmp = _create_temp(out)
    except OSError as e:
        raise SystemExit(f"stemdot.dask: {flag} {out}: cannot write in directory {os.path.dirname(out)}: {e.strerror}") from None
    os.close(fd)
    os.unlink(tmp)
    return out


def _check_sidecar(sidecar, inputs):
    """Refuses a result whose sidecar (RESULT.json, in the directory _check_out checked)
    would replace an input or something that is not a regular file."""
    if os.path.exists(sidecar) and not os.path.isfile(sidecar):
        raise SystemExit(f"stemdot.dask: --out: its sidecar {sidecar} exists and is not a regular file: not replacing it")
    if _is_input(sidecar, inputs):
        raise SystemExit(f"stemdot.dask: --out: its sidecar {sidecar} is an input of this run: not replacing it")


def _temp_prefix(out):
    return "." + os.path.basename(out) + "."


def _create_temp(out):
    """Creates the temporary file of out, .NAME.PID.NNN.tmp beside it, locked (flock)
    while open; returns its descriptor and path."""
    while True:
        tmp = os.path.join(os.path.dirname(out), f"{_temp_prefix(out)}{os.getpid()}.{random.randrange(1 << 32)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # a file system without locks
        return fd, tmp


def _remove_stale(out):
    """Removes the temporaries of out (.NAME.PID.NNN.tmp) whose writer is gone: no
    process PID on this machine and no lock on the file."""
    d, prefix = os.path.dirname(out), _temp_prefix(out)
    for name in os.listdir(d):
        m = re.fullmatch(re.escape(prefix) + r"([0-9]+)\.[0-9]+\.tmp", name)
        if not m or int(m[1]) == os.getpid() or _alive(int(m[1])):
            continue
        path = os.path.join(d, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer, on another machine, holds it
            except OSError:
                pass  # a file system without locks
            os.unlink(path)
        except OSError:
            pass
        finally:
            os.close(fd)


def _alive(pid):
    """Whether process pid lives on this machine (one of another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's
        pass
    return True


def _write_temp(path, write):
    """Writes a temporary file of path with write(f), flushed to the disk; returns its
    name."""
    _remove_stale(path)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o644)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _npy(array):
    return lambda f: np.save(f, array)


def _json(info):
    text = (json.dumps(info, indent=2) + "\n").encode()
    return lambda f: f.write(text)


def _save_all(files):
    """Writes each file (path → write(f)) all or nothing: temporary files flushed to the
    disk, renamed once all are written, then their directories flushed, so that a crash
    or power loss never leaves a partial or empty file under a final name."""
    temps = []
    try:
        for path, write in files.items():
            temps.append((_write_temp(path, write), path))
        for tmp, path in temps:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    for d in {os.path.dirname(path) for path in files}:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOTSUP):
                raise
        finally:
            os.close(dfd)


def _needs_centre(spec):
    """Whether spec is an auto spec (disk:auto, ring:auto,RI,RO, com:auto[,R]), made about
    the direct beam's centre (the Go API's masks.NeedsCentre)."""
    _, _, args = spec.partition(":")
    return args.split(",")[0].strip().lower() == "auto"


def _mask_sources(sig_shape, files, specs, names, centre=None):
    """Each mask's name, file (absolute) or spec, and index there, in the stack's order
    (the files' masks, then the specs'), as stemdot apply's sidecar gives them."""
    sources = []
    for file in files:
        shape = np.load(file, mmap_mode="r").shape
        sources += [{"file": os.path.abspath(file), "index": i} for i in range(1 if len(shape) == 2 else shape[0])]
    for spec in specs:
        sources += [{"spec": spec, "index": i} for i in range(stemdot.mask(spec, sig_shape, centre=centre).shape[0])]
    return [{"name": n, **s} for s, n in zip(sources, names, strict=True)]


def _sidecar(info, sources, centre, shifts_file, positions_out):
    """The RESULT.json of the run: the result's info (stemdot.dask.apply_masks) with what
    this command adds, as stemdot apply writes it: each mask's spec or file and index
    (sources: see _mask_sources), the centre of the auto specs (a dict of x, y, r and
    source, or None), the --shifts file, and the --roi-compact positions file."""
    info = dict(info, masks=[{"column": m["column"], **s} for m, s in zip(info["masks"], sources, strict=True)])
    if centre is not None:
        info["centre"] = centre
    if shifts_file is not None:  # a file of shifts per position, not a constant
        info["shifts"] = {"file": os.path.abspath(shifts_file), "mean": info["shifts"]["mean"]}
    if positions_out is not None:
        info["roi"] = dict(info["roi"], positions=os.path.basename(positions_out))
    return info


def main(argv=None):
    """The command; returns its exit status. Ctrl-C anywhere ends it with status 1 and a
    message (see stemdot._startup for the imports before it)."""
    if signal.getsignal(signal.SIGINT) is _startup.interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # KeyboardInterrupt from here on
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(_startup.MESSAGE, file=sys.stderr)
        return 1


def _main(argv):
    parser = _parser()
    args = parser.parse_args(argv)
    _check_empty(parser, args)
    from distributed import Client

    show = warnings.showwarning

    def show_warning(message, *args, **kwargs):  # stemdot's warnings, as stemdot apply prints them
        text = str(message)
        if not text.startswith("stemdot: "):
            return show(message, *args, **kwargs)
        print(f"stemdot.dask: warning: {_flag_names(parser, text.removeprefix('stemdot: '))}", file=sys.stderr)

    warnings.showwarning = show_warning

    reduce_outputs = {"sum": args.out if args.sum else None, "mean": args.mean, "max": args.max, "std": args.std}
    reduce_outputs = {name: path for name, path in reduce_outputs.items() if path is not None}
    reducing = args.sum or len(reduce_outputs) > 0
    if reducing and (args.mask or args.masks):
        raise SystemExit("stemdot.dask: --sum, --mean, --max and --std reduce the frames without masks: give them "
                         "without --mask and --masks, or apply the masks without them")
    if args.sum and not args.out:
        raise SystemExit("stemdot.dask: --sum writes the sum frame to --out: give --out SUM.npy")
    if not reducing and not args.mask and not args.masks:
        raise SystemExit("stemdot.dask: no masks: give a mask spec (--mask) or an NPY mask stack (--masks), "
                         "or reduce the frames with --sum, --mean, --max or --std")
    if not reducing and not args.out:
        raise SystemExit("stemdot.dask: --out RESULT.npy is required")
    if reducing and args.float64:
        raise SystemExit("stemdot.dask: --float64 is for mask applies: the reductions are float64 already")
    if reducing and args.out and not args.sum:
        raise SystemExit("stemdot.dask: --out without --sum or masks: give --sum to write the sum frame to it")

    shifts = _shifts(args)
    if reducing and shifts is not None:
        raise SystemExit("stemdot.dask: --shift and --shifts move the masks: give them for mask applies, not with "
                         "--sum, --mean, --max or --std")
    options = {k: getattr(args, k) for k in OPEN_KEYS if getattr(args, k) is not None}
    if reducing and args.roi_compact:
        raise SystemExit("stemdot.dask: --roi-compact is for mask applies: the reductions over --roi are frames already")
    if args.roi_compact and args.roi is None:
        raise SystemExit("stemdot.dask: --roi-compact needs --roi: without a region of interest the result holds every scan position")
    _check_options(parser, options)
    if reducing:
        flags = {"sum": "--out", "mean": "--mean", "max": "--max", "std": "--std"}
        outs = {name: _check_out(path, _inputs(args), flags[name]) for name, path in reduce_outputs.items()}
        if len(set(outs.values())) < len(outs):
            raise SystemExit("stemdot.dask: " + " and ".join(f"{flags[n]} {p}" for n, p in outs.items()
                                                             if list(outs.values()).count(p) > 1)
                             + " are the same file: give each output its own path")
    else:
        out = _check_out(args.out, _inputs(args), "--out")
        _check_sidecar(stemdot._sidecar_path(out), _inputs(args))
        positions_out = None
        if args.roi_compact:
            positions_out = _check_out(os.path.splitext(out)[0] + "_positions.npy", _inputs(args), "--roi-compact")
    resources = _resources(args.resources)
    print(f"stemdot.dask: connecting to {args.scheduler} (waiting up to --timeout {args.timeout:g} s)", file=sys.stderr)
    try:
        with Client(args.scheduler, timeout=args.timeout) as client:
            nodes = sdask.bootstrap(client, timeout=args.timeout)
            info = sdask.dataset_info(client, args.file, timeout=args.timeout, **options)
            workers = sum(n["n_workers"] for n in nodes.values())
            described = (f"stemdot.dask: {len(nodes)} Dask workers, {workers} stemdot workers; {args.file}: "
                         f"nav_shape {tuple(info['nav_shape'])}, sig_shape {tuple(info['sig_shape'])}, {info['dtype']}")
            if reducing:
                print(f"{described}; reducing: {', '.join(outs)}", file=sys.stderr)
                frames = sdask.reduce(client, args.file, list(outs), progress=not args.quiet, resources=resources or None,
                                      range_frames=args.range_frames, timeout=args.timeout, **options)
                results = {outs[name]: frames[name] for name in outs}
                files = {path: _npy(frame) for path, frame in results.items()}
            else:
                centre = None
                if any(_needs_centre(spec) for spec in args.mask):  # disk:auto, ...: the sum frame's centre
                    centre = sdask.centre(client, args.file, shifts=shifts, resources=resources or None,
                                          range_frames=args.range_frames, timeout=args.timeout, **options)
                    source = "sum frame" if shifts is None else "sum frame of the frames moved back by their shifts"
                    print(f"stemdot.dask: centre x {centre.x:.2f}, y {centre.y:.2f}, r {centre.r:.2f} px "
                          f"(the direct beam in the {source}) for the auto specs", file=sys.stderr)
                masks, names = stemdot.mask_stack(info["sig_shape"], files=args.masks, specs=args.mask,
                                                  dtype=np.float64 if args.float64 else np.float32, centre=centre)
                print(f"{described}; {masks.shape[0]} masks", file=sys.stderr)
                result = sdask.apply_masks(
                    client, args.file, masks, out_dtype=np.float64 if args.float64 else np.float32,
                    progress=not args.quiet, resources=resources or None, range_frames=args.range_frames,
                    timeout=args.timeout, roi_compact=args.roi_compact, shifts=shifts, names=names, **options,
                )
                files = {}
                if positions_out is not None:
                    result, positions = result
                    files[positions_out] = _npy(positions)
                sidecar = _sidecar(result.info, _mask_sources(info["sig_shape"], args.masks, args.mask, names, centre),
                                   centre and dict(centre._asdict(), source=source), args.shifts, positions_out)
                results = {out: result}
                files.update({stemdot._sidecar_path(out): _json(sidecar), out: _npy(result)})
        _save_all(files)
    except KeyboardInterrupt:
        print("stemdot.dask: interrupted: the run was cancelled on the workers, no result written", file=sys.stderr)
        return 1
    except (stemdot.StemdotError, OSError, RuntimeError, ValueError, TypeError) as e:
        print(f"stemdot.dask: {_flag_names(parser, str(e))}", file=sys.stderr)
        return 1
    for path, result in results.items():
        print(f"stemdot.dask: wrote {path} {result.shape} {result.dtype}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
