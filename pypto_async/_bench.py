"""``pypto-async bench``: run every benchmark script beside its reference, in one table.

The benchmarks live in ``benchmarks/`` of the source tree, one script per
layer (``bench_driver.py``, ``bench_runtime.py``, ``bench_kernels.py``,
``bench_compile.py``).  The convention they share:

* each script has ``main(argv)`` and runs as
  ``python bench_X.py [--quick] --json PATH`` (a script whose ``--json`` is a
  flag instead prints the JSON on stdout, and is run that way);
* each measures its own reference in the same process (an empty cffi call,
  numpy copies, numpy element-wise, numpy matmul ...) because ratios travel
  between machines and absolute times do not;
* its JSON may carry ``"rows"``: a list of ``{"name", "figure", "unit",
  "reference", "reference_name", "ratio", "target", "ok"}`` (``reference``,
  ``ratio``, ``target`` and ``ok`` optional).  For a script whose JSON has no
  ``rows``, an adapter here reads its keys.

Each script runs in its own process, so one that crashes or hangs cannot take
the others with it; a script that is absent is reported as missing, never
filled in.
"""

from __future__ import annotations

import gc
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import statistics
import time
from collections.abc import Callable

from ._cli_error import CliError

__all__ = ["EXPECTED", "find_benchmarks_dir", "format_markdown", "median_ci", "paired_rounds", "rows_from_result",
           "run_bench"]

#: The benchmark scripts the project promises, in the order they are run.
EXPECTED = ("bench_driver", "bench_runtime", "bench_kernels", "bench_compile")

#: Extra arguments per script for ``--quick`` when the script has no ``--quick`` of its own.
_QUICK_ARGS = {
    "bench_driver": ["--calls", "2000", "--repeats", "3", "--trials", "200", "--gap-us", "100"],
}


def paired_rounds(sides: dict, once: Callable, rounds: int, *, collect_every: int = 20,
                  collector_timed: bool = False) -> dict[str, list]:
    """Time every side once a round, for `rounds` short rounds: {side: [once(sides[side]) per round]}.

    The method the benchmarks' paired figures share.  The order of the sides
    turns round by round (rotated, and reversed every other round), so drift
    and other processes fall on the sides alike, and round i of one side pairs
    with round i of another.  No full collection runs between the sides (with
    torch imported one walks hundreds of thousands of objects and leaves the
    caches cold: a round's difference swung by about ±0.5 µs with one before
    each side, ±0.1 µs without); a full collection runs every
    `collect_every` rounds, untimed.  The cyclic collector is off while a
    side is timed, unless `collector_timed`: a figure whose question is what
    the population of live objects costs a launch keeps the young
    collections a user's launches pay, which can grow with it.
    """
    names = list(sides)
    out: dict[str, list] = {k: [] for k in names}
    gc.collect()
    if not collector_timed:
        gc.disable()
    try:
        for i in range(rounds):
            k = i % len(names)
            order = names[k:] + names[:k]
            for name in (order if i % 2 else order[::-1]):
                out[name].append(once(sides[name]))
            if i % collect_every == collect_every - 1:
                gc.collect()
    finally:
        if not collector_timed:
            gc.enable()
    return out


def median_ci(values) -> tuple[float, float, float]:
    """The median of `values` (paired differences or ratios) and its 95% confidence interval (order statistics)."""
    d = sorted(values)
    m = len(d)
    half = 0.98 * m ** 0.5
    return statistics.median(d), d[max(0, int(m / 2 - half))], d[min(m - 1, int(m / 2 + half))]


def find_benchmarks_dir(explicit: str | os.PathLike | None = None) -> pathlib.Path:
    """Return the benchmarks directory: ``explicit``, else ``benchmarks/`` beside the package."""
    if explicit is not None:
        path = pathlib.Path(explicit)
        if not path.is_dir():
            raise CliError(f"no benchmarks directory at {path}")
        return path
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
    if not path.is_dir():
        raise CliError("pypto-async bench runs the scripts of a source checkout's benchmarks/ (they use "
                       "its tests/ and examples/): install the checkout with pip install -e . "
                       "or pass --dir CHECKOUT/benchmarks")
    return path


def _row(name, figure, unit, *, reference=None, reference_name="", target="", ok=None, ratio=None) -> dict:
    if ratio is None and reference and figure is not None:
        ratio = figure / reference
    return {"name": name, "figure": figure, "unit": unit, "reference": reference,
            "reference_name": reference_name, "ratio": ratio, "target": target, "ok": ok}


def _driver_rows(result: dict) -> list[dict]:
    submit, idle = result["submit"], result["latency_idle"]
    hot = result.get("latency_back_to_back", {})
    rows = [
        _row("submit a notify (pto_stream_notify)", submit["notify_us"], "µs",
             reference=submit["nop_us"], reference_name="empty cffi call (pto_nop)",
             target="≤ 1 µs", ok=submit["notify_us"] <= 1.0),
        _row("completion latency, idle device (median)", idle["readable_median_us"], "µs",
             target="< 10 µs", ok=idle["readable_median_us"] < 10.0),
    ]
    if hot:
        rows.append(_row("completion latency, back to back (median)", hot["readable_median_us"], "µs"))
    return rows


#: bench_runtime's figures: (result key, row name, unit, reference keys (the first present wins),
#: reference name, target: the figure must be at most this).
_RUNTIME_ROWS = (
    ("roundtrip", "await an empty launch, round trip (median)", "µs",
     ("ref_raw_poll_us", "ref_raw_driver_us"), "raw driver round trip, host polling", 25.0),
    ("pipelined", "launches in flight from one coroutine, per launch", "µs",
     ("ref_raw_cffi_us",), "raw cffi submit + drain", 3.0),
    ("concurrent", "10,000 tasks each awaiting a launch, per launch", "µs",
     ("ref_batched_futures_us", "ref_asyncio_tasks_us"), "tasks awaiting futures resolved in batches", 10.0),
    ("concurrent_uvloop", "the same 10,000 tasks under uvloop, per launch", "µs",
     ("ref_batched_futures_us", "ref_asyncio_tasks_us"), "tasks awaiting futures resolved in batches", 10.0),
    ("overlap", "pipelined example / max(copy-only, compute-only)", "x",
     ("ref_raw_driver_x",), "the driver alone", 1.25),
)


def _runtime_rows(result: dict) -> list[dict]:
    rows = []
    for key, name, unit, ref_keys, ref_name, limit in _RUNTIME_ROWS:
        r = result.get(key)
        if not r:
            continue
        reference = next((r[k] for k in ref_keys if k in r), None)
        target = f"≤ {limit:g}x" if unit == "x" else f"≤ {limit:g} {unit}"
        rows.append(_row(name, r["value"], unit, reference=reference, reference_name=ref_name,
                         target=target, ok=r["value"] <= limit))
        if key == "pipelined" and "turns_cost_us" in r:
            cost = r["turns_cost_us"]
            rows.append(_row("the event loop's turns in that loop, per launch", cost, "µs",
                             reference=r["ref_without_turns_us"],
                             reference_name="the same loop giving the loop no turns",
                             target="≤ 0.1 µs", ok=cost <= 0.1))
    return rows


_ADAPTERS: dict[str, Callable[[dict], list[dict]]] = {
    "bench_driver": _driver_rows,
    "bench_runtime": _runtime_rows,
}


def rows_from_result(name: str, result: dict) -> list[dict]:
    """Return the table rows of one script's JSON result (its ``rows``, or its adapter's)."""
    if isinstance(result.get("rows"), list):
        rows = []
        for r in result["rows"]:
            rows.append(_row(r["name"], r.get("figure"), r.get("unit", ""), reference=r.get("reference"),
                             reference_name=r.get("reference_name", ""), target=str(r.get("target", "")),
                             ok=r.get("ok"), ratio=r.get("ratio")))
        return rows
    adapter = _ADAPTERS.get(name)
    if adapter is None:
        raise ValueError(f"{name} wrote JSON without 'rows' and no adapter reads it")
    return adapter(result)


def _source(script: pathlib.Path) -> str:
    try:
        return script.read_text(encoding="utf-8")
    except OSError:
        return ""


def _json_to_stdout(source: str) -> bool:
    """True for a script whose ``--json`` is a flag that prints the JSON (not a path)."""
    compact = source.replace(" ", "")
    return '"--json",action="store_true"' in compact


def _run_one(script: pathlib.Path, *, quick: bool, timeout: int) -> dict:
    name = script.stem
    with tempfile.TemporaryDirectory(prefix="pto_bench_") as tmp:
        out_json = pathlib.Path(tmp) / f"{name}.json"
        source = _source(script)
        to_stdout = _json_to_stdout(source)
        cmd = [sys.executable, str(script), *(["--json"] if to_stdout else ["--json", str(out_json)])]
        if quick:
            cmd += ["--quick"] if "--quick" in source else _QUICK_ARGS.get(name, [])
        # The scripts import the same pypto_async as this command, installed or not.
        root = str(pathlib.Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  cwd=script.parent.parent, env=env)
        except subprocess.TimeoutExpired:
            return {"status": "failed", "error": f"timed out after {timeout} s", "seconds": timeout, "rows": []}
        seconds = round(time.perf_counter() - t0, 2)
        entry: dict = {"status": "ok", "returncode": proc.returncode, "seconds": seconds,
                       "command": cmd[1:], "stdout": proc.stdout[-4000:]}
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            entry.update(status="failed", error=tail[-1] if tail else f"exit status {proc.returncode}", rows=[])
            return entry
        try:
            text = proc.stdout if to_stdout else out_json.read_text(encoding="utf-8")
            result = json.loads(text[text.index("{"):] if to_stdout else text)
            entry["rows"] = rows_from_result(name, result)
            entry["result"] = result
        except (OSError, ValueError, KeyError, TypeError) as exc:
            entry.update(status="failed", error=f"unreadable results: {exc}", rows=[])
        return entry


def _fmt(x, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, (int, float)):
        text = f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    else:
        text = str(x)
    return f"{text} {unit}".strip()


def format_table(results: dict[str, dict]) -> str:
    """Return the results as text: a table of figure, reference, ratio, target and verdict.

    Rows are grouped by script; scripts that are missing or failed are listed
    after the table with the reason.
    """
    header = ("benchmark", "figure", "reference", "ratio", "target", "")
    lines: list[tuple[str, ...] | str] = []
    for name, entry in results.items():
        if entry["status"] != "ok":
            continue
        lines.append(f"[{name}]")
        for r in entry["rows"]:
            ref = _fmt(r["reference"], r["unit"]) if r["reference"] is not None else ""
            if r["reference_name"]:  # (a row without a reference figure may still say what it was read against)
                ref = f"{ref} ({r['reference_name']})" if ref else r["reference_name"]
            verdict = {True: "ok", False: "MISSED", None: ""}[r["ok"]]
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
            lines.append(("  " + r["name"], _fmt(r["figure"], r["unit"]), ref, ratio, r["target"], verdict))
    cells = [line for line in lines if isinstance(line, tuple)]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
           "  ".join("-" * w for w in widths).rstrip()]
    for line in lines:
        out.append(line if isinstance(line, str) else "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    for name, entry in results.items():
        if entry["status"] != "ok":
            out.append(f"{name}: {entry['status'].upper()} ({entry.get('error', '')})")
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def format_markdown(doc: dict) -> str:
    """Return a results document (``bench_results.json``) as a Markdown page.

    The page names the date, commit, machine and its load when the run began
    and ended, then one table per script: figure, measured, reference (same
    run), ratio and target.  It is generated; edit the scripts, not the page.
    """
    load = doc.get("load") or {}

    def _load(key):
        v = load.get(key)
        return "unknown" if not v else ", ".join(f"{x:.2f}" for x in v)

    lines = [
        "# Benchmark results",
        "",
        "<!-- Generated by `pypto-async bench --markdown docs/benchmarks.md` (or `--render "
        "bench_results.json`); do not edit by hand. -->",
        "",
        f"- date (UTC): {doc.get('date', 'unknown')}",
        f"- commit: {doc.get('commit') or 'unknown'}",
        f"- machine: {doc.get('cpus', '?')} CPUs, {doc.get('machine', '?')}, python {doc.get('python', '?')}"
        + (f", torch {doc['torch']}" if doc.get("torch") else ", torch not installed"),
        f"- load average (1, 5, 15 min): {_load('start')} at the start, {_load('end')} at the end",
    ]
    peak = max([*(load.get("start") or []), *(load.get("end") or [])], default=0)
    if doc.get("cpus") and peak > doc["cpus"]:
        lines.append(f"- the machine was shared: a load average above its {doc['cpus']} CPUs means other work "
                     "competed with the benchmarks for them, so read the figures as a loaded machine's")
    judged = [r["ok"] for e in doc.get("benchmarks", {}).values() if e.get("status") == "ok"
              for r in e.get("rows", []) if r.get("ok") is not None]
    lines.append(f"- targets met: {sum(judged)} of {len(judged)} (a row marked *no* is not within its target in this run)")
    if doc.get("quick"):
        lines.append("- **quick run** (`--quick`): a smoke run, not a measurement")
    lines += [
        "",
        "Each figure is measured beside a reference in the same process; compare ratios across "
        "machines, not microseconds. What each figure means: [performance.md](performance.md).",
    ]
    failed = []
    for name, entry in doc.get("benchmarks", {}).items():
        if entry.get("status") != "ok":
            failed.append(f"- `{name}`: {entry.get('status')} ({entry.get('error', '')})")
            continue
        lines += ["", f"## `{name}`", "",
                  "| figure | measured | reference (same run) | ratio | target | met |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in entry["rows"]:
            ref = _fmt(r["reference"], r["unit"]) if r["reference"] is not None else ""
            if r["reference_name"]:  # (a row without a reference figure may still say what it was read against)
                ref = f"{ref} ({r['reference_name']})" if ref else r["reference_name"]
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
            met = {True: "yes", False: "no", None: ""}[r["ok"]]
            cells = (r["name"], _fmt(r["figure"], r["unit"]), ref, ratio, r["target"] or "", met)
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    if failed:
        lines += ["", "## Not measured in this run", "", *failed]
    return "\n".join(lines) + "\n"


def _git_commit(root: pathlib.Path) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _torch_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # not installed, or no metadata
        return None


def _write_markdown(doc: dict, path: str) -> None:
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_markdown(doc), encoding="utf-8")
    print(f"page written to {out}")


def run_bench(args) -> int:
    """Run the ``bench`` subcommand; return the exit status (1 if a script failed)."""
    if getattr(args, "render", None):
        try:
            doc = json.loads(pathlib.Path(args.render).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read {args.render}: {exc}") from None
        _write_markdown(doc, args.markdown or "benchmarks.md")
        return 0
    bench_dir = find_benchmarks_dir(args.dir)
    found = {p.stem: p for p in sorted(bench_dir.glob("bench_*.py"))}
    names = list(EXPECTED) + sorted(set(found) - set(EXPECTED))
    if args.only:
        unknown = [n for n in args.only if n not in names]
        if unknown:
            raise CliError(f"unknown benchmark {unknown[0]!r} (known: {', '.join(names)})")
        names = [n for n in names if n in args.only]
    results: dict[str, dict] = {}
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = _loadavg()
    commit = _git_commit(bench_dir)  # before the run: the code that was measured
    progress = None
    if not args.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=len(names), unit="bench", file=sys.stderr, leave=False)
    try:
        for name in names:
            if progress is not None:
                progress.set_description(name)
            if name not in found:
                results[name] = {"status": "missing", "error": f"{bench_dir / (name + '.py')} does not exist",
                                 "rows": []}
            else:
                results[name] = _run_one(found[name], quick=args.quick, timeout=args.timeout)
            if progress is not None:
                progress.update()
    finally:
        if progress is not None:
            progress.close()
    print(f"pypto_async benchmarks (python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs{', quick run: not a measurement' if args.quick else ''})")
    print(format_table(results))
    doc = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "quick": bool(args.quick), "date": started, "commit": commit,
           "torch": _torch_version(), "load": {"start": load_start, "end": _loadavg()},
           "benchmarks": results}
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str), encoding="utf-8")
    print(f"results written to {path}")
    if getattr(args, "markdown", None):
        _write_markdown(doc, args.markdown)
    return 1 if any(e["status"] == "failed" for e in results.values()) else 0
