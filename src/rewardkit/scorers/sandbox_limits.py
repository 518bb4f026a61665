"""What one sandboxed run may use (:class:`Limits`), and the launcher's own exit status."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LAUNCH_FAILED", "Limits"]

#: Where the launcher's own failures are reported (exit status), so they are not mistaken for the program's.
LAUNCH_FAILED = 97


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run.

    ``timeout_s`` is the wall-clock deadline; ``cpu_s`` defaults to it rounded up, plus one.
    ``output_bytes`` is how much of stdout/stderr is read back; ``file_size_mb`` caps every file the
    program writes, its stdout and stderr included. In the confined modes, ``disk_mb`` and ``max_files``
    cap everything it writes in total (a tmpfs), and the network is always isolated; ``isolate_network``
    only matters unconfined.
    """

    timeout_s: float = 4.0
    cpu_s: int | None = None
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_processes: int = 64
    max_open_files: int = 256
    output_bytes: int = 8 << 20
    isolate_network: bool = True
    disk_mb: int = 64
    max_files: int = 4096
