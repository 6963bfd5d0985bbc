"""The ``pypto-async`` command: demo, bench, trace, analyze, info, cache.

Every subcommand has ``--help``.  A failure prints one line,
``pypto-async <command>: error: <what went wrong>``, to stderr and exits with
status 1 (2 for a usage error); set ``PYPTO_ASYNC_DEBUG=1`` for the traceback.
Heavy imports (the runtime, matplotlib, tqdm) happen inside the subcommand
that needs them, so ``--help`` and ``info`` stay quick.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform as _platform
import shlex
import shutil
import subprocess
import sys

from ._cli_error import CliError

__all__ = ["main", "build_parser", "CliError"]

PROG = "pypto-async"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, then exit 2 as argparse does
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# --- trace ------------------------------------------------------------------


def _cmd_trace(args: argparse.Namespace) -> int:
    from ._plot import load_trace, render_trace

    src = pathlib.Path(args.file)
    if not src.is_file():
        raise CliError(f"no such trace file: {src}")
    out = pathlib.Path(args.output) if args.output else src.with_suffix(".png")
    doc = load_trace(src)
    path = render_trace(doc, out, title=args.title or src.name, dpi=args.dpi)
    slices = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X")
    print(f"wrote {path} ({slices} slices)")
    return 0


# --- analyze -------------------------------------------------------------------


def _cmd_analyze(args: argparse.Namespace) -> int:
    from ._analyze import analyze_files, format_analysis

    src = pathlib.Path(args.records)
    if not src.is_file():
        raise CliError(f"no such record file: {src}")
    if args.deps is not None and not pathlib.Path(args.deps).is_file():
        raise CliError(f"no such deps file: {args.deps}")
    try:
        a = analyze_files(src, args.deps)
    except json.JSONDecodeError as exc:
        raise CliError(f"not JSON: {exc}") from None
    print(json.dumps(a.to_json(), indent=2) if args.json else format_analysis(a))
    return 0


# --- info and cache -----------------------------------------------------------


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _cache_usage(cache: pathlib.Path) -> tuple[int, int]:
    """Return (cached kernels, total bytes of files) of the kernel cache."""
    kernels = cache / "kernels"
    entries = sum(1 for p in kernels.iterdir() if p.is_dir() and not p.name.startswith("tmp-")) \
        if kernels.is_dir() else 0
    total = 0
    for root, _, files in os.walk(cache):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return entries, total


def _compiler_info() -> dict:
    """Return the C compiler kernels are built with (``$CC``, default ``cc``), its version and flags."""
    cc = shlex.split(os.environ.get("CC") or "cc")
    try:
        from .ir import DEFAULT_CFLAGS as flags
    except ImportError:
        flags = ()
    if not cc or shutil.which(cc[0]) is None:
        return {"cc": shlex.join(cc), "version": "not found (set CC)", "flags": list(flags)}
    try:
        out = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30)
        version = (out.stdout or out.stderr).splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError):
        version = "unknown"
    return {"cc": shlex.join(cc), "version": version, "flags": list(flags)}


def _cache_dir() -> pathlib.Path:
    try:
        from . import ir
    except ImportError as exc:
        raise CliError(f"the compiler (pypto_async.ir) cannot be imported: {exc}") from None
    return pathlib.Path(ir.cache_dir())


def _device_info(platform: str) -> dict:
    from ._driver import PTO_ABI_VERSION, check, ffi, lib

    dev = ffi.new("pto_device **")
    check(lib.pto_device_open(platform.encode(), ffi.NULL, dev), f"opening the {platform!r} device")
    try:
        info = ffi.new("pto_device_info *")
        check(lib.pto_device_get_info(dev[0], info), "pto_device_get_info")
        return {
            "platform": ffi.string(info.platform).decode(),
            "abi_version": PTO_ABI_VERSION,
            "cores": info.cores,
            "copy_engines": info.copy_engines,
            "aicpu_thread_num": info.aicpu_thread_num,
            "device_memory": info.device_memory,
            "ring_task_window": info.ring_task_window,
            "ring_heap": info.ring_heap,
            "ring_dep_pool": info.ring_dep_pool,
        }
    finally:
        lib.pto_device_close(dev[0])


def _aliases(platform: str) -> str:
    from ._signature import PLATFORMS

    return ", ".join(name for name, canonical in PLATFORMS.items() if canonical == platform and name != platform) \
        or "none"


def _cmd_info(args: argparse.Namespace) -> int:
    from . import __version__

    device = _device_info(args.platform)
    compiler = _compiler_info()
    try:
        cache = _cache_dir()
        entries, size = _cache_usage(cache)
        cache_info = {"dir": str(cache), "entries": entries, "bytes": size}
    except CliError as exc:
        cache_info = {"dir": None, "error": str(exc)}
    report = {
        "pypto_async": __version__,
        "python": _platform.python_version(),
        "machine": f"{_platform.system()} {_platform.machine()}, {os.cpu_count()} CPUs",
        "device": device,
        "compiler": compiler,
        "cache": cache_info,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    d = device
    rows = [
        ("pypto_async", f"{__version__} (driver ABI {d['abi_version']})"),
        ("python", f"{report['python']} on {report['machine']}"),
        ("platform", f"{d['platform']} (aliases: {_aliases(d['platform'])})"),
        ("device", f"{d['cores']} cores, {d['copy_engines']} copy engines, "
                   f"{d['aicpu_thread_num']} scheduler thread(s), {_human_bytes(d['device_memory'])} memory"),
        ("stream rings", f"{d['ring_task_window']} slots, {_human_bytes(d['ring_heap'])} argument heap, "
                         f"{d['ring_dep_pool']} event waits per stream"),
        ("compiler", f"{compiler['cc']} ({compiler['version']})"),
        ("kernel flags", " ".join(compiler["flags"]) or "-"),
    ]
    if cache_info.get("dir"):
        rows.append(("kernel cache", f"{cache_info['dir']} ({cache_info['entries']} kernels, "
                                     f"{_human_bytes(cache_info['bytes'])})"))
    else:
        rows.append(("kernel cache", cache_info["error"]))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    cache = _cache_dir()
    entries, size = _cache_usage(cache)
    if args.action == "clear":
        from . import ir

        removed = ir.clear_cache()
        print(f"removed {removed} cached kernels ({_human_bytes(size)}) from {cache}")
    else:
        print(f"{cache} ({entries} kernels, {_human_bytes(size)})")
    return 0


# --- demo and bench live in their own modules -----------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    return run_demo(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    from ._bench import run_bench

    return run_bench(args)


# --- the parser ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``pypto-async`` (all subcommands)."""
    parser = _Parser(
        prog=PROG,
        description="Run, measure and inspect pypto_async on the simulated device.",
        epilog="Start with 'pypto-async demo': copies and kernels overlapping on three streams.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"pypto_async {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("demo", help="run the pipelined batch loop and write its trace",
                       description="Run a pipelined batch loop on the sim device: H2D on one stream, "
                                   "a kernel against a resident weight on a second, D2H on a third. "
                                   "Print throughput and the overlap achieved; write the trace JSON and PNG.")
    p.add_argument("--batches", type=_positive_int, default=64, help="batches to run (default: 64)")
    p.add_argument("--rows", type=_positive_int, default=256, help="rows per batch tile (default: 256)")
    p.add_argument("--cols", type=_positive_int, default=1024, help="columns per batch tile (default: 1024)")
    p.add_argument("--depth", type=_positive_int, default=3,
                   help="batches in flight at once (buffers per stage, default: 3)")
    p.add_argument("--cores", type=_positive_int, default=None,
                   help="compute cores of the sim device (default: the driver's, min(4, CPUs this process may use))")
    p.add_argument("--out", "-o", default="pypto_async_demo", metavar="DIR",
                   help="directory for demo_trace.json and demo_trace.png (default: ./pypto_async_demo)")
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    p.add_argument("--no-png", action="store_true", help="write the trace JSON only")
    p.add_argument("--graph", action="store_true",
                   help="run the pipelined loop as graph replays (capture each batch once, replay per batch)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("bench", help="run every benchmark next to its reference",
                       description="Run the benchmarks in benchmarks/ (each beside its reference, "
                                   "in one process each), print a table of figure, reference, ratio "
                                   "and target, and write the results as JSON.")
    p.add_argument("--dir", default=None, metavar="DIR",
                   help="the benchmarks directory (default: benchmarks/ of the source tree)")
    p.add_argument("--json", default="bench_results.json", metavar="PATH",
                   help="where to write the results (default: ./bench_results.json)")
    p.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="run only this benchmark script (e.g. bench_driver); repeatable")
    p.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not a measurement")
    p.add_argument("--timeout", type=_positive_int, default=600, metavar="S",
                   help="seconds allowed per benchmark script (default: 600)")
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    p.add_argument("--markdown", default=None, metavar="PATH",
                   help="also write the results as a dated Markdown page (e.g. docs/benchmarks.md)")
    p.add_argument("--render", default=None, metavar="JSON",
                   help="run nothing: render an earlier bench_results.json as the --markdown page")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("trace", help="render a trace JSON as a swimlane PNG",
                       description="Render a Chrome/Perfetto trace written by pypto_async "
                                   "(RunConfig(enable_chip_swimlane=True), w.trace(), or the demo) "
                                   "as a PNG with one lane per stream, core and copy engine.")
    p.add_argument("file", metavar="FILE.json", help="the trace to render")
    p.add_argument("-o", "--output", metavar="FILE.png", help="the PNG to write (default: FILE.png)")
    p.add_argument("--title", help="the figure's title (default: the file name)")
    p.add_argument("--dpi", type=_positive_int, default=120, help="resolution (default: 120)")
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser("analyze", help="scheduler overhead of a swimlane record file (PyPTO's sched_overhead_analysis)",
                       description="Read PyPTO-format l2_swimlane_records.json (dispatch, start, end, finish "
                                   "per task) and the program's deps.json; report, per engine kind and "
                                   "system-wide, the share of the makespan an idle core had ready work, the "
                                   "pickup (dispatch -> start) distribution, and the critical path split into "
                                   "compute and scheduler time.")
    p.add_argument("records", metavar="RECORDS", help="the l2_swimlane_records.json to analyze")
    p.add_argument("--deps", metavar="deps.json", default=None,
                   help="the task graph (default: a deps.json beside RECORDS, if there is one)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the report")
    p.set_defaults(func=_cmd_analyze)

    p = sub.add_parser("info", help="show the platform, device shape, compiler and cache",
                       description="Show the platform, the sim device's shape, the C compiler "
                                   "kernels are built with, and the kernel cache.")
    p.add_argument("--platform", default="sim", help="the platform to open (default: sim)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("cache", help="show or clear the compiled-kernel cache",
                       description="Show the compiled-kernel cache ('cache info') or remove "
                                   "every entry ('cache clear').")
    p.add_argument("action", choices=["info", "clear"], nargs="?", default="info",
                   help="info (default) or clear")
    p.set_defaults(func=_cmd_cache)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run ``pypto-async`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, not a traceback
        if os.environ.get("PYPTO_ASYNC_DEBUG"):
            raise
        from .errors import PtoError

        if not isinstance(exc, (CliError, PtoError, OSError, ValueError, ImportError)):
            raise
        message = str(exc) or type(exc).__name__
        print(f"{PROG} {args.command}: error: {message.splitlines()[0]}", file=sys.stderr)
        return 1
