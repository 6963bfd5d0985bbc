"""Launch: the future of one unit of queued work.

A :class:`Launch` stands for a group of commands queued on one stream: a
kernel launch with its host copies and temporary frees, or a single copy.
Every command of the group carries a completion token; the worker's token map
holds the Launch until the record of its last command arrives, so the host
arrays it references stay alive even if you drop the Launch or cancel the task
awaiting it.  The first failure among its records is its error.

Waiting is the one way of :mod:`._waitable`: register a waiter, suspend;
the completion pump wakes every waiter of the list in one pass.  Cancelling
a waiting task removes its waiter and nothing else: work already on the
device cannot be withdrawn.  Work still waiting for room in its stream's
ring can be, explicitly, with :meth:`Launch.cancel`.  The hottest wait,
``await launch`` under asyncio, is the documented exception: it registers
the task's future itself (``_owaiters``), and finishing the launch resolves
it to the launch's outputs or error.

A stream marker (``await stream``, :meth:`Stream.sync`) and a worker sync
point (:meth:`ChipWorker.sync`) are launches of no result (:class:`_Marker`).
"""

from __future__ import annotations

import warnings

from ..errors import PtoCanceledError, PtoInvalidStateError
from ._complete import cancel, observe, raise_carried
from ._queue import _running_loop, release_waiters, resolve_soon
from ._waitable import _Until, _Waitable

__all__ = ["Launch", "mark_turn", "submitted_launch"]

_new = object.__new__  # Launch._make: no class of the hierarchy defines __new__


class Launch(_Waitable):
    """The future of a kernel launch or copy queued on a stream.

    You get one from a registered kernel (``handle(...)``,
    ``handle.submit(...)``), :meth:`ChipWorker.run` or :meth:`ChipWorker.copy`;
    the constructor refuses.

    ``await launch`` suspends until the launch completed and returns
    :meth:`result`, raising its error if it failed.  A launch that has
    already completed is answered without suspending.  A launch returned by
    ``handle.submit(...)`` is different in one way: awaiting it waits only
    until its commands entered the stream's ring (back-pressure) and returns
    the Launch itself; use :meth:`wait` (or :meth:`sync`, or await its
    stream) to wait for completion.

    Cancelling a task that awaits a launch only drops that task's waiter: the
    device work goes on, and the host arrays stay alive until it is done.
    A launch that failed and whose error nobody retrieved warns
    (``RuntimeWarning``) when it is garbage-collected, like an asyncio future.

    Retrieving the error (awaiting the launch, :meth:`sync`, :meth:`result`,
    :meth:`exception`) is what *observes* the stream's failure: later work
    on the stream fails as its dependent until then, and runs normally once
    it was retrieved (work queued before still fails).  So does a dependency
    error behind it reaching you: from a later launch, an event recorded
    after it, or ``await stream`` / :meth:`Stream.sync`, which raise the
    failure the stream carries.  A fire-and-forget launch that fails thus
    makes the later launches on its stream fail until the stream's next
    sync (or an await of one of them) reports it.  Collecting the launch
    observes nothing (garbage collection happens at no determined time), and
    a dependency error delivered elsewhere does not retrieve the launch's own
    error: collecting it still warns.
    """

    __slots__ = ("_remaining", "_keep", "_out", "_t0", "_t1", "_event", "_await_entry", "_span",
                 "_owaiters")

    _withdrawable = True  # Launch.cancel may try (a graph replay's says no)
    # Whether completing it is Launch._finish and nothing more, so _ok may finish it in line: this
    # class's and a subclass's that says so itself (__init_subclass__), not one that inherits it.
    _plain = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._plain = cls.__dict__.get("_plain", False)

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "Launch cannot be constructed directly; call a registered kernel "
            "(ChipWorker.register(compiled)(...)), ChipWorker.run() or ChipWorker.copy()"
        )

    @classmethod
    def _make(cls, worker, stream, name: str, remaining: int, keep, out, await_entry: bool = False) -> Launch:
        # Every slot set; the defaults by chained stores (one per launch, so fewer instructions count).
        launch = _new(cls)
        launch._worker = worker
        launch._stream = stream
        launch._name = name
        launch._remaining = remaining
        launch._keep = keep
        launch._out = out
        launch._await_entry = await_entry
        # _span: (first token, last token, last seq) while in the driver's backlog;
        # _owaiters: asyncio futures of `await launch`, one or a list.
        launch._exc = launch._waiters = launch._entry_waiters = launch._event = launch._span = \
            launch._owaiters = None
        launch._done = launch._entered = launch._retrieved = False
        launch._t0 = launch._t1 = 0
        return launch

    # -- awaiting ---------------------------------------------------------------

    def __await__(self):
        if not self._await_entry:
            if not self._done:
                pump = self._worker._pump
                if pump.waits_for_outcomes:
                    # The documented exception to the one way to block (see _waitable):
                    # under asyncio the task awaits a future that _finish resolves to this
                    # launch's outcome, with no generator of ours in between: one object
                    # and one frame less per waiting task.
                    return pump.wait_outcome(self)
            return self._until(False)
        return self._await_submitted()

    def _await_submitted(self):
        """``await`` of a launch from ``submit()``: until it entered the ring; returns the Launch."""
        if not self._entered:
            yield from self._until(True)
        elif self._await_entry is _TURN:
            # The launch path found this task long without suspending (the pump
            # module's essay on producers): give the loop its turn now.  It counts
            # such launches itself, so an await that does not suspend costs nothing.
            yield from self._worker._pump.give_turn()
        return self

    async def wait(self):
        """Wait until the launch completed; return :meth:`result`.

        Unlike ``await launch`` on a launch from ``handle.submit(...)``, this
        always waits for completion.  Suspends unless it already completed
        (and then yields to the event loop now and then, so a loop of such
        waits does not hold it).

        Raises
        ------
        PtoError
            The launch's error if it failed.
        """
        return await _Until(self, False)

    async def submitted(self) -> Launch:
        """Wait until every command of the launch entered its stream's ring.

        Returns the Launch.  Suspends only while the stream's window is full
        (and yields to the event loop now and then otherwise, as ``await``
        does).
        """
        return await _Until(self, True)

    def cancel(self) -> bool:
        """Withdraw the launch if none of its commands has started yet.

        A launch waiting its turn anywhere before the device starts it can be
        withdrawn: in its stream's ring behind earlier work, in the driver's
        backlog behind a full ring, or held on the host (waiting for device
        memory, or queued behind such a launch).  A service sheds load this
        way when a deadline passes.  The withdrawal is atomic with the
        device's scheduler: the launch either runs fully or not at all.
        It then fails at once with
        :class:`~pypto_async.errors.PtoCanceledError`: its kernel never
        runs (its output arrays are not written), the runtime lets go of its
        host arrays, and its device temporaries are freed in stream order.
        Work queued after it runs as if it had completed, in order: later
        launches on the stream, events recorded after it, and other streams
        waiting on those; the waits it was ordered behind still hold what
        follows it.  A launch whose kernel (or any of its commands) has
        started cannot be withdrawn, nor can a graph replay.

        Returns
        -------
        bool
            True if the launch was withdrawn; False if it had started (or
            completed, or its worker is closed): it then runs to completion
            as usual.
        """
        return cancel(self._worker._queue, self)

    # -- state ------------------------------------------------------------------

    def done(self) -> bool:
        """Return True once every command of the launch has completed (or failed)."""
        return self._done

    def result(self):
        """Return the launch's outputs, or raise its error.

        The outputs are the arguments bound to ``Out``/``InOut`` parameters as
        you passed them (host arrays, now holding the results, or
        DeviceTensors): the single one, or a tuple; ``None`` when the program
        has no return.  For a copy, the destination.

        Raises
        ------
        PtoInvalidStateError
            If the launch has not completed yet.
        PtoError
            The launch's error if it failed.
        """
        if not self._done:
            raise PtoInvalidStateError(f"{self._name} has not completed; await it or call sync()")
        exc = self._exc
        if exc is not None:
            self._mark_retrieved()
            observe(self._worker, exc)
            raise exc
        return self._out

    _outcome = result  # what awaiting (and sync()) returns

    def exception(self):
        """Return the launch's error, or None if it succeeded.

        Raises
        ------
        PtoInvalidStateError
            If the launch has not completed yet.
        """
        if not self._done:
            raise PtoInvalidStateError(f"{self._name} has not completed; await it or call sync()")
        self._mark_retrieved()
        exc = self._exc
        if exc is not None:
            observe(self._worker, exc)
        return exc

    @property
    def stream(self):
        """The :class:`Stream` the launch was queued on."""
        return self._stream

    @property
    def event(self):
        """An :class:`Event` that completes once this launch has completed.

        Created when you first ask: it is recorded on the launch's stream at
        that moment, so it also covers whatever was queued on the stream in
        between (use ``stream.record()`` right after queueing for an exact
        point).  For a launch that already completed, the event is complete,
        and :meth:`Event.elapsed_ms` times it at the launch's end.
        """
        if self._event is None:
            self._event = self._stream._event_after(self)
        return self._event

    @property
    def submitted_to_ring(self) -> bool:
        """True once every command of the launch has entered the stream's ring."""
        return self._entered

    def __repr__(self) -> str:
        if not self._done:
            state = "in ring" if self._entered else "waiting for ring room"
        elif self._exc is not None:
            state = f"failed: {type(self._exc).__name__}"
        else:
            state = "done"
        return f"<Launch {self._name} on stream {self._stream.id} {state}>"

    # -- called by the worker (lock held) -----------------------------------------

    def _ok(self, start_ns: int, end_ns: int) -> None:
        if not self._t0:
            self._t0 = start_ns
        self._t1 = end_ns
        self._remaining -= 1
        if not self._remaining:
            if (self._owaiters is None and self._plain and self._exc is None and self._waiters is None
                    and self._entry_waiters is None):
                # _finish in line for the commonest completion (a launch nobody awaits, as a
                # pipelined producer leaves them): nothing to resolve, nothing to release.
                self._done = self._entered = True
                self._keep = None
            else:
                self._finish()

    def _fail(self, exc) -> None:
        if self._exc is None:
            self._exc = exc
        self._remaining -= 1
        if not self._remaining:
            self._finish()

    def _finish(self) -> None:
        # _Waitable._finish and more, written out: the hot path of every completion.
        self._done = True
        self._entered = True
        self._keep = None
        exc = self._exc
        waiters = self._owaiters
        if waiters is not None:
            self._owaiters = None
            if (exc is None and type(waiters) is not list and not waiters.done()
                    and waiters.get_loop() is _running_loop()):
                waiters.set_result(self._out)  # the common case, one task awaiting on its loop: _deliver in line
            else:
                self._deliver(waiters if type(waiters) is list else (waiters,), exc)
        if exc is not None and self._retrieved is False and not isinstance(exc, PtoCanceledError):
            # Only a failed launch carries a finalizer: the success path stays cheap.
            self._retrieved = _Unretrieved(self._name, exc)
        if self._waiters or self._entry_waiters:
            release_waiters(self._worker._queue, self)

    def _deliver(self, waiters, exc) -> None:
        """Resolve the futures of tasks awaiting this launch (asyncio) to its outcome.

        Off their loop's thread (a close or a blocking drive on another
        thread), through the loop's thread-safe path (``_queue.resolve_soon``).
        """
        here = _running_loop()
        for fut in waiters:
            if fut.done():  # its task was cancelled
                continue
            try:
                if fut.get_loop() is not here:
                    resolve_soon(fut, self._out, exc)
                elif exc is None:
                    fut.set_result(self._out)
                else:
                    fut.set_exception(exc)
                if exc is not None:
                    self._mark_retrieved()
                    observe(self._worker, exc, locked=True)  # the task resumes raising it
            except RuntimeError:  # its event loop is gone
                pass

    def _mark_retrieved(self) -> None:
        """Note that the error was seen: collecting the launch will not warn."""
        log = self._retrieved
        if log is not True and log is not False:
            log.exc = None
        self._retrieved = True


class _Unretrieved:
    """Warns, when collected with its launch, that the launch's error was never retrieved.

    ``Launch._retrieved`` holds False (not seen yet), True (seen, or never to
    warn), or one of these, armed when a failed launch finishes.  Like the
    traceback logger of early asyncio futures, it keeps the finalizer off the
    millions of launches that succeed.
    """

    __slots__ = ("name", "exc")

    def __init__(self, name: str, exc: BaseException):
        self.name = name
        self.exc = exc

    def __del__(self):
        exc = self.exc
        if exc is None:
            return
        try:
            warnings.warn(f"{self.name} failed and its error was never retrieved: {exc!r}",
                          RuntimeWarning, stacklevel=2)
        except Exception:  # interpreter shutting down
            pass


class _Submitted(Launch):
    """A launch from ``handle.submit(...)``: ``await`` waits until it entered its ring, and returns it.

    The same object as a :class:`Launch` but for its ``__await__``, which is
    :meth:`Launch._await_submitted` itself, a generator function: the await's
    iterator comes with no call of ours before it (``Launch.__await__`` calls
    it for the launches of other classes that ``submit()`` makes, as a graph
    replay's).
    """

    __slots__ = ()
    _plain = True
    __await__ = Launch._await_submitted


#: Makes the Launch of a ``submit()`` (``Launch._make``'s arguments).
submitted_launch = _Submitted._make


#: ``Launch._await_entry`` (truthy, as for any launch from ``submit()``) of a launch whose
#: ``await`` is to yield to the loop once: the launch path sets it (see the pump module's
#: essay on producers).
_TURN = object()


def mark_turn(launch: Launch) -> None:
    """Make ``await launch`` (a launch from ``submit()``) yield to the loop once."""
    launch._await_entry = _TURN


class _Marker(Launch):
    """A launch of no result: a point on a stream, or on every stream (a sync point).

    ``await stream`` and :meth:`Stream.sync` wait for a marker queued on the
    stream (a notify command); :meth:`ChipWorker.sync` and
    :meth:`ChipWorker.wait` for a sync point (:class:`_SyncPoint`).
    Waiting for a stream's marker raises what an :class:`~._event.Event`
    recorded at that point raises (:func:`._complete.raise_carried`, the one
    rule of such points): the failure the stream carries (a
    :class:`~pypto_async.errors.PtoDependencyError` behind a failed command),
    observed as it is raised, so work queued on the stream afterwards runs.
    A marker never warns when collected: its failure is its stream's, which
    the launches before it report too.
    """

    __slots__ = ()

    # The one await loop, which ends in _outcome (raise_carried), not Launch's asyncio fast path.
    __await__ = _Waitable.__await__

    @classmethod
    def _make(cls, worker, stream, name: str) -> _Marker:
        marker = super()._make(worker, stream, name, 1, None, None)
        marker._retrieved = True
        return marker

    _outcome = raise_carried


class _SyncMarker(_Marker):
    """A worker sync point's marker on one stream (``_stream.sync_point``).

    Until the latest of them on a stream has completed healthy, later worker
    syncs look at that stream again (``CommandQueue.syncing``): a failure it
    carries that one sync did not deliver (it raises only the first) is the
    next one's, with or without new work there.
    """

    __slots__ = ("_token",)

    def _finish(self) -> None:
        super()._finish()
        if self._exc is None:
            syncing = self._worker._queue.syncing
            sid = self._stream._id
            if syncing.get(sid) == self._token:  # the latest: the stream was healthy there
                del syncing[sid]


class _SyncPoint(_Marker):
    """A worker sync point: what :meth:`ChipWorker.sync` and :meth:`ChipWorker.wait` wait for.

    It has no command: it completes once the token map drained up to it
    (:func:`._wait.add_sync_point`), every stream at once, closed ones and
    the frees of collected tensors included.  The failures it reports are
    those of the stream markers queued just before it, one on every open
    stream (``_stream.sync_point``): the rule of ``await stream``, applied
    to each.  Waiting for it raises the first of their failures, in stream
    order, as that stream's sync would (and so delivers it); a failure
    another stream carries is left to that stream, raised by its own sync
    or the next worker sync.  A closed worker or a lost device is the
    worker's own report (``ChipWorker._check_device``), before any stream's.
    """

    __slots__ = ("_markers",)

    def _outcome(self) -> None:
        self._worker._check_device()  # its markers were canceled or lost with it: say so once
        for marker in self._markers:
            if marker._exc is not None:
                raise_carried(marker)
