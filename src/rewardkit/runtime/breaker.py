"""A circuit breaker that opens only when a server is really down, and probes it back with one request.

The breaker of one server (one judge replica). It *opens* when, within the last ``window_s``, there
was no success at all and at least ``threshold`` failures (connection refused or reset, timeouts,
5xx): a server that answers some requests is never declared down, however many others fail; or
at once after ``threshold`` connection refusals in a row (nothing listens: the server is gone). While
open it lets exactly one *probe* through at a time, the first ``PROBE_FIRST_S`` after opening and
then at intervals doubling up to ``PROBE_MAX_S``; the probe's success closes the circuit at once.

Requests that arrive while the circuit is open wait for a probe rather than fail. A request fails
with ``circuit_open`` only when the outage is older than ``cooldown_s`` *and* a probe sent after
the request arrived has failed, so a fresh batch always learns the server's state from a fresh
probe instead of being failed for a fixed cooldown. Thread-safe; the clock is injectable.
"""

from __future__ import annotations

import math
import threading
import time

#: Seconds from opening to the first probe.
PROBE_FIRST_S = 0.1
#: Longest interval between two probes of a down server.
PROBE_MAX_S = 1.0


class CircuitBreaker:
    """The health of one server: ``closed`` (send), ``open`` (down: wait for a probe) or ``half_open``.

    :meth:`gate` answers ``"allow"`` (send; in half-open state this request is the probe),
    ``"wait"`` (ask again when :meth:`next_change_in` has passed or after any outcome) or
    ``"open"`` (fail the request with :meth:`message`).
    """

    def __init__(
        self, threshold: int = 5, cooldown_s: float = 10.0, window_s: float = 2.0, clock=time.monotonic
    ):
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.window_s = window_s
        self.clock = clock
        self.state = "closed"
        self.failures = 0  # since the last success
        self.refusals = 0  # connection refusals since the last success
        self.last_success = -math.inf
        self.down_since = 0.0
        self.opened_at = 0.0
        self.times_opened = 0
        self.last_error = ""
        self.probes = 0  # probes started, ever
        self.last_failed_probe = 0  # the number of the last probe that failed
        self._recent: list[float] = []  # failure times within window_s
        self._interval = PROBE_FIRST_S
        self._probe_due = 0.0
        self._probe = False
        self._lock = threading.Lock()

    # -- asking ------------------------------------------------------------------------------------
    def ticket(self) -> int:
        """A request's arrival mark: pass it to :meth:`gate` so that only probes sent later fail it."""
        return self.probes

    def available(self) -> bool:
        """Whether requests may go without a probe (the circuit is closed)."""
        return self.state == "closed"

    def gate(self, ticket: int | None = None) -> str:
        """May a request that arrived at ``ticket`` go now? ``"allow"``, ``"wait"`` or ``"open"``."""
        with self._lock:
            if self.state == "closed":
                return "allow"
            now = self.clock()
            if not self._probe and now >= self._probe_due:
                self.state = "half_open"
                self._probe = True
                self.probes += 1
                return "allow"
            if self._must_fail(ticket, now):
                return "open"
            return "wait"

    def would_fail(self, ticket: int | None) -> bool:
        """Whether a request that arrived at ``ticket`` is to fail now (without claiming a probe)."""
        with self._lock:
            return self.state != "closed" and self._must_fail(ticket, self.clock())

    def _must_fail(self, ticket: int | None, now: float) -> bool:
        fresh_probe_failed = ticket is None or self.last_failed_probe > ticket
        return now - self.down_since >= self.cooldown_s and fresh_probe_failed

    def next_change_in(self) -> float:
        """Seconds until the next probe may go (``inf`` while closed or a probe is in flight)."""
        with self._lock:
            if self.state == "closed" or self._probe:
                return math.inf
            return max(0.0, self._probe_due - self.clock())

    # -- telling -----------------------------------------------------------------------------------
    def success(self) -> None:
        """The server answered (any status that shows it is alive, 429 included)."""
        with self._lock:
            self.failures = 0
            self.refusals = 0
            self.last_success = self.clock()
            self._recent.clear()
            self.state = "closed"
            self._probe = False
            self._interval = PROBE_FIRST_S

    def failure(self, error: str, probe: bool = False, refused: bool = False) -> None:
        """A connection error, timeout or 5xx; ``probe``: it was this breaker's probe; ``refused``: the
        connection was refused (nothing listens)."""
        with self._lock:
            now = self.clock()
            self.failures += 1
            self.refusals += refused
            self.last_error = error
            self._recent = [t for t in self._recent if now - t < self.window_s]
            self._recent.append(now)
            if probe and self._probe:
                self._probe = False
                self.last_failed_probe = self.probes
                self.state = "open"
                self._interval = min(PROBE_MAX_S, self._interval * 2)
                self._probe_due = now + self._interval
            elif self.state == "closed" and self._is_down(now):
                self.state = "open"
                self.opened_at = self.down_since = now
                self.times_opened += 1
                self._interval = PROBE_FIRST_S
                self._probe_due = now + self._interval

    def _is_down(self, now: float) -> bool:
        if self.refusals >= self.threshold:
            return True
        return len(self._recent) >= self.threshold and now - self.last_success >= self.window_s

    def abandon(self, probe: bool = True) -> None:
        """A probe ended without telling us anything (cancelled): let another probe go."""
        if probe:
            with self._lock:
                if self._probe:
                    self._probe = False
                    if self.state == "half_open":
                        self.state = "open"

    def message(self) -> str:
        """Why requests are refused, with the failures, the last error and how long it has been down."""
        down = max(0.0, self.clock() - self.down_since)
        return (
            f"circuit open: the server failed {self.failures} times in a row with no success for "
            f"{down:.1f}s (last error: {self.last_error}); a probe after this request arrived failed too"
        )
