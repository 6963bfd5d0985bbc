"""``pypto-async demo``: a pipelined batch loop on three streams, traced.

What it runs, on the sim device, in asyncio:

* a ``@pl.jit`` kernel ``y = silu(x * w)`` over a batch tile ``x``, with
  ``w`` a weight that stays resident in device memory for the whole run;
* for each batch: copy ``x`` host → device on the *input* stream, run the
  kernel on the *compute* stream once that copy is done, copy ``y`` back on
  the *output* stream once the kernel is done (``Stream.wait`` on the launch:
  a device-side dependency, no host round trip).  ``--depth`` batches are in
  flight at once, each with its own device buffers, so batch *i*'s copies
  overlap batch *i-1*'s kernel;
* the same batches once more, one after another on a single stream, as the
  reference the pipeline's speed-up is measured against.

The two loops take turns, five rounds of each (serial then pipelined, then
pipelined then serial, and so on), every round measured the same way; each loop's host wall time is the
median of its rounds.  One round takes 10-20 ms, and on a shared host what
else runs meanwhile moves a single round's time by more than the pipeline
gains: taking turns puts a noisy stretch on both loops alike, and the
medians drop the rounds it hit hardest.  The report says so.

Both loops *submit ahead*: every batch is queued before the host waits for
any, behind a gate the host opens once everything is queued (:class:`_Gate`),
and device buffers are reused in device order (the H2D stream waits for the
D2H that last used a set), so the modeled device never waits for a host
that submits slower than it runs: the modeled speed-up comes out at the
pipeline's bound (serial time over its busiest engine's), run after run,
beside the host's wall-clock speed-up, which is the host's threads'.  (With
``--graph`` the graphs' streams are independent and compete for the two copy
engines; the model places their copies in modeled order, ready time then
stream, whatever order the host ran them in, so it too comes out at the
bound, the same in every run.)

With ``--graph`` the pipelined loop goes through graphs: each batch's three
commands are captured once (``w.capture()``, one graph per batch in flight,
each on its own three streams), and each batch is one replay with its host
arrays bound.

Every output is spot-checked against numpy inside the timed loops (so the
host's checking does not hide the device's overlap), and the last batch of
each output buffer in full afterwards.  Every round is captured with ``w.trace()``
(the last round's pipelined trace is the one written): the command prints throughput, the speed-up over the serial
run and the overlap the trace shows, writes ``demo_trace.json`` (open it in
https://ui.perfetto.dev) and ``demo_trace.png``, and says where they are.  The
PNG needs matplotlib (``python3 -m pip install '.[demo]'`` in the source checkout); without it the demo
runs all the same and its last line says how to get the picture.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import statistics
import sys
import time

import pypto_async.language as pl  # module level: @pl.jit resolves annotations in these globals

from ._cli_error import CliError

__all__ = ["run_demo", "make_kernel", "DemoResult", "NO_MATPLOTLIB"]

#: The report's last line when the swimlane PNG cannot be drawn.
NO_MATPLOTLIB = "swimlane: not drawn, matplotlib is not installed (python3 -m pip install '.[demo]' in the source checkout adds it)"


def make_kernel(rows: int, cols: int, blocks: int):
    """Return the demo's ``@pl.jit`` kernel for ``(rows, cols)`` tiles over `blocks` blocks."""
    per_block = rows // blocks
    tile = max(d for d in range(1, per_block + 1) if per_block % d == 0 and d * cols <= 16384) \
        if cols <= 16384 else 1

    @pl.jit
    def gated_silu(x: pl.Tensor, w: pl.Tensor, y: pl.Out[pl.Tensor]):
        for b in pl.spmd(blocks):
            for i in pl.range(0, per_block, tile):
                r = b * per_block + i
                h = pl.load(x, [r, 0], [tile, cols]) * pl.load(w, [r, 0], [tile, cols])
                pl.store(h / (pl.exp(pl.neg(h)) + 1.0), [r, 0], y)  # silu(x * w)

    return gated_silu


class DemoResult:
    """What the demo measured (also returned to tests)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"DemoResult({self.__dict__!r})"


def _silu(h):
    import numpy as np

    return h / (np.exp(-h) + np.float32(1))


class _Gate:
    """Hold streams on the device until the host has queued everything: submit ahead.

    Each stream first waits for an event the host records only once every
    batch is queued (``pto_event_reserve``: waits queued before the record
    wait for it).  The device then starts from a full queue, so its modeled
    timeline is the device's alone, however slowly a busy host submits.
    """

    def __init__(self, w, streams):
        from ._driver import check, ffi, lib
        from .runtime._submit import enqueue_hook

        self._w, self._lib, self._hook = w, lib, enqueue_hook
        out = ffi.new("pto_event **")
        check(lib.pto_event_create(w._queue.dev, out), "pto_event_create")
        self._ev = out[0]
        check(lib.pto_event_reserve(self._ev), "pto_event_reserve")
        for s in streams:
            enqueue_hook(w._queue, s, lib.pto_stream_wait_event, (s._ptr, self._ev), record=False)
        self._stream = w.stream()

    def open(self) -> None:
        """Let the held streams go: record the event they wait for."""
        self._hook(self._w._queue, self._stream, self._lib.pto_stream_record, (self._stream._ptr, self._ev),
                   record=False)

    def close(self) -> None:
        """Destroy the event (after the streams it held have passed it)."""
        self._lib.pto_event_destroy(self._ev)


def _blocks_for(rows: int, cores: int) -> int:
    for b in range(min(cores, rows), 0, -1):
        if rows % b == 0:
            return b
    return 1


async def _pipeline(w, kernel, weight, batches, outs, depth: int, progress, check, traces: list) -> tuple[float, dict]:
    """Run every batch through H2D → kernel → D2H on three streams, submitted ahead.

    The host queues every batch before it waits for any: ``depth`` sets of
    device buffers are reused in turn, each reuse ordered on the device
    (the H2D stream waits for the D2H of the batch that used the set last),
    so the host never blocks the pipeline, and the device's timeline is the
    device's, not the host's round trips.  Each batch lands in its own host
    array (``outs``), checked as it arrives.  Returns the seconds it took
    and the streams' names by id (for the trace).
    """
    import numpy as np

    rows, cols = weight.shape
    n = len(outs)
    s_in, s_k, s_out = w.stream(), w.stream(), w.stream()
    xs = [w.alloc_tensor((rows, cols), np.float32, stream=s_in) for _ in range(depth)]
    ys = [w.alloc_tensor((rows, cols), np.float32, stream=s_k) for _ in range(depth)]
    d2hs: list = []
    backs: list = []
    gate = _Gate(w, [s_in])  # s_k and s_out wait on s_in's copies: held with it
    async with w.trace() as window:  # from here on: the buffers' set-up stays out of the trace
        t0 = time.perf_counter()
        for i in range(n):
            slot = i % depth
            if i >= depth:
                s_in.wait(backs[i - depth])  # the set's last batch is back: its buffers are free (on the device)
            h2d = w.copy(xs[slot], batches[i % len(batches)], stream=s_in)
            s_k.wait(h2d)
            launch = kernel(xs[slot], weight, ys[slot], stream=s_k)
            s_out.wait(launch)
            d2hs.append(w.copy(outs[i], ys[slot], stream=s_out))
            backs.append(s_out.record())  # this batch's D2H, not the ones queued after it
        gate.open()
        for i, d2h in enumerate(d2hs):
            await d2h
            check(i, outs[i])
            progress.update()
        elapsed = time.perf_counter() - t0
    traces.append(window.trace)
    gate.close()
    for t in xs + ys:
        w.free_tensor(t)
    return elapsed, {s_in.id: "H2D", s_k.id: "compute", s_out.id: "D2H"}


async def _pipeline_graph(w, kernel, weight, batches, outs, depth: int, progress, check,
                          traces: list) -> tuple[float, dict]:
    """The same loop through graphs: each batch is one replay with its host arrays bound.

    A batch captured on its H2D stream ends with that stream waiting for its
    D2H (forks rejoin), so a graph's next replay follows its last on the
    device and batches in flight at once each need their own three streams:
    one graph per set, with the set's streams and buffers.  Every replay is
    queued before the host waits for any.  Returns the seconds the loop took
    and the streams' names by id.
    """
    import numpy as np

    rows, cols = weight.shape
    n = len(outs)
    slots, names, heads = [], {}, []
    for k in range(depth):
        s_in, s_k, s_out = w.stream(), w.stream(), w.stream()
        heads.append(s_in)
        xd = w.alloc_tensor((rows, cols), np.float32, stream=s_in)
        yd = w.alloc_tensor((rows, cols), np.float32, stream=s_k)
        async with w.capture(name=f"batch {k}", stream=s_in) as cap:
            x = cap.input("x", (rows, cols), np.float32)
            y = cap.input("y", (rows, cols), np.float32)
            s_k.wait(w.copy(xd, x, stream=s_in))
            s_out.wait(kernel(xd, weight, yd, stream=s_k))
            w.copy(y, yd, stream=s_out)
            s_in.wait(s_out)
        slots.append((cap.graph, xd, yd))
        names.update({s_in.id: f"H2D {k}", s_k.id: f"compute {k}", s_out.id: f"D2H {k}"})
    gate = _Gate(w, heads)
    async with w.trace() as window:  # from here on: the set-up stays out of the trace
        t0 = time.perf_counter()
        replays = [slots[i % depth][0].replay(x=batches[i % len(batches)], y=outs[i]) for i in range(n)]
        gate.open()
        for i, replay in enumerate(replays):
            await replay
            check(i, outs[i])
            progress.update()
        elapsed = time.perf_counter() - t0
    traces.append(window.trace)
    gate.close()
    for g, xd, yd in slots:
        g.close()
        w.free_tensor(xd)
        w.free_tensor(yd)
    return elapsed, names


async def _serial(w, kernel, weight, batches, outs, check, traces: list | None = None, progress=None) -> float:
    """Run the same batches one after another on one stream, submitted ahead; return seconds.

    One set of device buffers, reused in stream order; each batch lands in
    its own host array, checked as it arrives.
    """
    import numpy as np

    rows, cols = weight.shape
    s = w.stream()
    x = w.alloc_tensor((rows, cols), np.float32, stream=s)
    y = w.alloc_tensor((rows, cols), np.float32, stream=s)
    gate = _Gate(w, [s])
    async with (w.trace() if traces is not None else contextlib.nullcontext()) as window:
        t0 = time.perf_counter()
        d2hs = []
        for i in range(len(outs)):
            w.copy(x, batches[i % len(batches)], stream=s)
            kernel(x, weight, y, stream=s)
            d2hs.append(w.copy(outs[i], y, stream=s))
        gate.open()
        for i, d2h in enumerate(d2hs):
            await d2h
            check(i, outs[i])
            if progress is not None:
                progress.update()
        elapsed = time.perf_counter() - t0
    if traces is not None:
        traces.append(window.trace)
    gate.close()
    w.free_tensor(x)
    w.free_tensor(y)
    return elapsed


#: Rounds of each loop the demo times by default (their medians are its figures).
ROUNDS = 5


async def _demo(rows: int, cols: int, n_batches: int, depth: int, out_dir: pathlib.Path,
                progress_file, show_progress: bool, cores: int | None = None, graph: bool = False,
                on_open=None, rounds: int = ROUNDS) -> DemoResult:
    import numpy as np

    from .runtime import ChipWorker, RunConfig

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    out_dir.mkdir(parents=True, exist_ok=True)
    trace_path = out_dir / "demo_trace.json"
    rng = np.random.default_rng(2024)
    weight_host = rng.standard_normal((rows, cols)).astype(np.float32)
    batches = [rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(min(n_batches, 8))]
    want = [_silu(b * weight_host) for b in batches]
    nbytes = rows * cols * 4
    config = RunConfig(platform="sim", cores=cores, device_memory=max(64 << 20, (2 * depth + 4) * nbytes * 2))

    # In the timed loops each batch is spot-checked (every 61st element: the
    # host must not become the bottleneck); the last batch of each buffer is
    # then checked in full.
    samples = [wt.ravel()[::61].copy() for wt in want]

    def check(i: int, got) -> None:
        if not np.allclose(got.ravel()[::61], samples[i % len(batches)], rtol=1e-5, atol=1e-5):
            raise CliError(f"batch {i}: the device's result differs from numpy's")

    def check_full(i: int, got) -> None:
        if not np.allclose(got, want[i % len(batches)], rtol=1e-5, atol=1e-5):
            raise CliError(f"batch {i}: the device's result differs from numpy's")

    async with ChipWorker(config=config) as w:
        cores = sum(1 for e in w.stats().engines if e.kind == "core")
        if on_open is not None:
            on_open(cores)  # the header, printed before the progress bar is drawn under it
        kernel_fn = make_kernel(rows, cols, _blocks_for(rows, cores))
        compiled = kernel_fn.compile(batches[0], weight_host, batches[0])
        kernel = w.register(compiled)
        weight = w.alloc_tensor((rows, cols), np.float32, init=weight_host)  # resident for the run
        # One host array per batch, touched (no page faults in the timed loops: np.zeros maps
        # untouched zero pages, whose first writes, the serial loop's D2H copies, fault page by page).
        outs = [np.full((rows, cols), np.nan, np.float32) for _ in range(n_batches)]

        # Warm up (first-touch of buffers, kernel load).
        await _serial(w, kernel, weight, batches, outs[:min(2, n_batches)], check)

        from tqdm import tqdm

        # The two loops take turns, `rounds` of each (S P, P S, S P, ...), every round
        # measured the same way (traced, submitted ahead, checked as it arrives); each loop's
        # figure is the median of its rounds.  On a shared host a single round's wall time is at
        # the mercy of whatever else ran during its 10-20 ms: taking turns puts a noisy stretch
        # on both loops alike, and the medians drop the rounds it hit hardest.
        serial_runs: list[float] = []
        pipelined_runs: list[float] = []
        loop = _pipeline_graph if graph else _pipeline
        # Drawn under the header, on a terminal only (disable=None), and erased when done
        # (leave=False): the report that follows replaces it.
        with tqdm(total=2 * rounds * n_batches, unit="batch", desc=f"{rounds} rounds of each loop",
                  file=progress_file, disable=None if show_progress else True, leave=False) as progress:
            for rnd in range(rounds):
                # Serial first in even rounds, pipelined first in odd ones (S P, P S, S P, ...):
                # neither loop always follows the other.
                for which in (("serial", "pipelined") if rnd % 2 == 0 else ("pipelined", "serial")):
                    for out in outs:
                        out.fill(np.nan)  # poisoned: every round must write every batch again
                    got: list = []
                    if which == "serial":
                        serial_runs.append(await _serial(w, kernel, weight, batches, outs, check, got, progress))
                        serial_trace = got[0]
                    else:
                        pipelined_s, names = await loop(w, kernel, weight, batches, outs, depth, progress, check,
                                                        got)
                        pipelined_runs.append(pipelined_s)
                        pipelined_trace = got[0]
        for i in range(max(0, n_batches - min(depth, n_batches)), n_batches):
            check_full(i, outs[i])
        stats = w.stats()
        w.free_tensor(weight)

    trace = dataclasses.replace(pipelined_trace, stream_names={**pipelined_trace.stream_names, **names})
    trace.save(trace_path)
    model = _modeled(serial_trace, trace, w.device_profile) if w.timing == "model" else None
    return DemoResult(
        model=model,
        rows=rows, cols=cols, batches=n_batches, depth=depth, batch_bytes=nbytes,
        serial_s=statistics.median(serial_runs), pipelined_s=statistics.median(pipelined_runs),
        serial_runs=serial_runs, pipelined_runs=pipelined_runs, rounds=rounds,
        trace=trace, summary=trace.summary(),
        trace_path=trace_path, png_path=None, png_missing=False, stats=stats, cores=cores, graph=graph,
    )


def _modeled(serial, pipelined, profile) -> dict:
    """The device model's view of both runs: their modeled device time, and the pipeline's bound.

    A run's time is its device work's span, from the first copy's modeled
    start to the last copy's end (both runs are queued in full before the
    device starts: :class:`_Gate`).  The bound is the serial run's modeled
    time over its busiest resource's: with two or more copy engines H2D and
    D2H overlap each other and the kernels, so the pipeline can at best take
    the longest of compute, H2D and D2H; with one, copies share it.
    """
    def busy(trace, kind: str) -> int:
        return sum(r.duration_ns for r in trace.records if r.kind_name == kind)

    def span(trace) -> int:
        work = [r for r in trace.records if r.kind_name in ("h2d", "d2h", "launch", "block")]
        return max(r.end_ns for r in work) - min(r.start_ns for r in work) if work else 0

    s = serial.summary()
    h2d, d2h = busy(serial, "h2d"), busy(serial, "d2h")
    copies = max(h2d, d2h) if profile.copy_engines >= 2 else h2d + d2h
    serial_ns = span(serial)
    limit = max(serial_ns - h2d - d2h, s.compute_ns, copies, 1)
    return {"profile": profile.name, "serial_ns": serial_ns, "pipelined_ns": span(pipelined),
            "compute_ns": serial_ns - h2d - d2h, "h2d_ns": h2d, "d2h_ns": d2h,
            "bound": serial_ns / limit}


def run_demo(args) -> int:
    """Run the ``demo`` subcommand; return the exit status."""
    out_dir = pathlib.Path(args.out)
    graph = getattr(args, "graph", False)

    def header(cores: int) -> None:
        print("\n".join(_header_lines(args.batches, args.rows, args.cols, args.depth, cores, graph)), flush=True)

    result = asyncio.run(_demo(args.rows, args.cols, args.batches, args.depth, out_dir,
                               sys.stderr, not args.no_progress, args.cores, graph, on_open=header))
    if not args.no_png:
        if _can_draw():
            from ._plot import render_trace

            result.png_path = render_trace(result.trace.to_chrome(), out_dir / "demo_trace.png",
                                           title=f"pypto-async demo: {result.batches} batches of "
                                                 f"{result.rows}x{result.cols} fp32, depth {result.depth}")
        else:
            result.png_missing = True
    print(format_report(result, header=False))
    return 0


def _can_draw() -> bool:
    """True if matplotlib (the ``demo`` extra, not a core dependency) can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _header_lines(batches: int, rows: int, cols: int, depth: int, cores: int, graph: bool) -> list[str]:
    """Return the report's first two lines: what runs, and on what."""
    batch_bytes = rows * cols * 4
    in_flight = min(depth, batches)
    size = f"{batch_bytes / 2**20:.2f} MiB" if batch_bytes >= 2**20 else f"{batch_bytes / 2**10:.1f} KiB"
    how = (f"one graph replay per batch ({in_flight} graphs, each on its own 3 streams: H2D | kernel | D2H)"
           if graph else f"3 streams (H2D | kernel | D2H), {in_flight} batch{'es' if in_flight != 1 else ''} "
                         "in flight")
    return [
        f"pypto_async demo: {batches} batches of {rows}x{cols} float32 "
        f"({size} each), y = silu(x * w) with w resident on the device",
        f"  sim device: {cores} core{'s' if cores != 1 else ''}, {how}",
    ]


def _model_lines(m: dict, wall_speedup: float) -> list[str]:
    speedup = m["serial_ns"] / m["pipelined_ns"] if m["pipelined_ns"] else 0.0
    return [
        f"  modeled device ({m['profile']} profile): serial {m['serial_ns'] / 1e6:.2f} ms, pipelined "
        f"{m['pipelined_ns'] / 1e6:.2f} ms (compute {m['compute_ns'] / 1e6:.2f} ms, H2D {m['h2d_ns'] / 1e6:.2f} ms, "
        f"D2H {m['d2h_ns'] / 1e6:.2f} ms serial)",
        f"  speed-up: modeled {speedup:.2f}x, {speedup / m['bound']:.0%} of its bound {m['bound']:.2f}x "
        f"(serial over its busiest engine); host wall {wall_speedup:.2f}x",
    ]


def format_report(r: DemoResult, *, header: bool = True) -> str:
    """Return the demo's printed report (without its first two lines if not `header`)."""
    s = r.summary
    moved = 2 * r.batch_bytes * r.batches  # H2D in, D2H out
    in_flight = min(r.depth, r.batches)
    rounds = getattr(r, "rounds", 1)
    lines = [
        *(_header_lines(r.batches, r.rows, r.cols, r.depth, r.cores, r.graph) if header else []),
        f"  serial (1 stream):     {r.serial_s * 1e3:8.1f} ms   {r.batches / r.serial_s:8.0f} batches/s",
        f"  {'replayed graphs:' if r.graph else 'pipelined (3 streams):':22s} {r.pipelined_s * 1e3:8.1f} ms   {r.batches / r.pipelined_s:8.0f} batches/s   "
        f"{moved / r.pipelined_s / 1e9:.2f} GB/s copied   speed-up {r.serial_s / r.pipelined_s:.2f}x",
        *([f"  (host wall times: each loop's median of {rounds} rounds, the two loops taking turns; "
           f"trace and overlap: each loop's last round)"] if rounds > 1 else []),
        f"  overlap (from the trace): {s.overlapped_ns / 1e6:.1f} ms of copies ran under kernels, "
        f"{s.overlap:.0%} of the shorter of compute ({s.compute_ns / 1e6:.1f} ms) and copy "
        f"({s.copy_ns / 1e6:.1f} ms); engines busy {s.concurrency:.2f}x the wall time",
        *(_model_lines(r.model, r.serial_s / r.pipelined_s) if getattr(r, "model", None) else []),
        f"  every batch matched numpy (spot checks; the last {in_flight} in full); "
        f"{r.stats.launches} launches, "
        f"{r.stats.bytes_h2d / 2**20:.0f} MiB H2D, {r.stats.bytes_d2h / 2**20:.0f} MiB D2H in all",
        f"trace: {r.trace_path}  (open in https://ui.perfetto.dev)",
    ]
    if r.png_path is not None:
        lines.append(f"swimlane: {r.png_path}")
    elif r.png_missing:
        lines.append(NO_MATPLOTLIB)
    return "\n".join(lines)
