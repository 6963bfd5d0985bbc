"""Collect completion records from the driver's queue, with deadlines."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from pypto_async._driver import PTO_EDEVLOST, PTO_ETIMEDOUT, ffi, lib

__all__ = ["CompletionLog", "Record", "new_token"]

_tokens = itertools.count(0x1000)


def new_token() -> int:
    """Return a completion token no other test in this process has used."""
    return next(_tokens)


@dataclass(frozen=True)
class Record:
    """A Python copy of one ``pto_completion``."""

    token: int
    status: int
    stream_id: int
    seq: int
    submit_ns: int
    start_ns: int
    end_ns: int
    cause_token: int
    message: str
    flags: int = 0
    fail_id: int = 0

    @classmethod
    def from_cdata(cls, c) -> Record:
        return cls(c.token, c.status, c.stream_id, c.seq, c.submit_ns, c.start_ns, c.end_ns,
                   c.cause_token, ffi.string(c.message).decode("utf-8", "replace"), c.flags,
                   c.fail_id)


class CompletionLog:
    """Drain a device's completion queue into a dict keyed by token.

    Every token must arrive exactly once: a second record for a token fails
    the test on the spot.
    """

    def __init__(self, device, batch: int = 64):
        self.device = device
        self.records: dict[int, Record] = {}
        self._batch = batch
        self._buf = ffi.new("pto_completion[]", batch)

    def drain(self, max_records: int | None = None) -> list[Record]:
        """Drain what is ready now (up to `max_records` in one call); never blocks."""
        n = lib.pto_cq_drain(self.device, self._buf, min(max_records or self._batch, self._batch))
        assert n >= 0, f"pto_cq_drain returned {n}"
        out = []
        for i in range(n):
            rec = Record.from_cdata(self._buf[i])
            assert rec.token != 0, "a record with token 0 was pushed"
            assert rec.token not in self.records, f"token {rec.token:#x} completed twice"
            self.records[rec.token] = rec
            out.append(rec)
        return out

    def wait(self, *tokens: int, timeout_s: float = 10.0) -> dict[int, Record]:
        """Drain until every token in `tokens` has a record; return those records.

        Raises AssertionError naming the missing tokens after `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain_all()
            missing = [t for t in tokens if t not in self.records]
            if not missing:
                return {t: self.records[t] for t in tokens}
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"tokens {[hex(t) for t in missing]} did not complete in {timeout_s} s")
            rc = lib.pto_cq_wait(self.device, max(1, int(left * 1e6)))
            if rc == -PTO_EDEVLOST:
                # A lost device answers at once; pace the poll for the records still due.
                time.sleep(0.001)
                continue
            assert rc in (0, -PTO_ETIMEDOUT), f"pto_cq_wait returned {rc}"

    def drain_all(self) -> int:
        """Drain everything ready now; return how many records came."""
        total = 0
        while True:
            n = len(self.drain())
            total += n
            if n < self._batch:
                return total

    def observe(self, token: int) -> int:
        """Deliver `token`'s record as a host would (``pto_completion_observe``); return its result.

        Draining observes no failure: a test that wants its stream to run new
        work again after a failure says that the failure reached its user.
        """
        rec = self.records[token]
        c = ffi.new("pto_completion *")
        c.token, c.status, c.stream_id, c.fail_id = rec.token, rec.status, rec.stream_id, rec.fail_id
        return lib.pto_completion_observe(self.device, c)

    def __getitem__(self, token: int) -> Record:
        return self.records[token]

    def __contains__(self, token: int) -> bool:
        return token in self.records
