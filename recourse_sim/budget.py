"""Input limits. Memory budgets: declared counts are checked against the machine before
anything is allocated, so a typo of a few zeros is a one-line error instead of a crash.
Magnitudes: every real number a scenario or a data file gives lies within
±`MAX_MAGNITUDE`."""

from __future__ import annotations

import os

from recourse_sim.errors import ConfigError

# bytes a person's row costs while a round runs, per feature (features, reports, true
# values, changes, gradients, copies) and besides (scores, decisions, people.csv text)
BYTES_PER_FEATURE = 8 * 16
BYTES_PER_ROW = 400

# Every real-valued setting and data value lies within ±MAX_MAGNITUDE (larger ones
# overflow the round's arithmetic: squares and sums of 10^6 rows).
MAX_MAGNITUDE = 1e9


def memory_limit() -> int:
    """The memory this process may use: the machine's, or less under an address-space
    limit (``ulimit -v``)."""
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, soft)
    except (ImportError, ValueError, OSError):
        pass
    return limit


def rows_over_budget(n: int, d: int, what: str = "rows") -> str | None:
    """Why `n` rows of `d` features will not fit (more than half the memory this process
    may use: the rest is the interpreter, torch and the model), or None if they do."""
    need = n * (d * BYTES_PER_FEATURE + BYTES_PER_ROW)
    allowed = memory_limit() // 2
    if need <= allowed:
        return None
    return (
        f"{n:,} {what} of {d} features need about {_size(need)} while a run may use "
        f"{_size(allowed)} here; lower it"
    )


def check_file(size: int, field: str, source: str, factor: int = 20) -> None:
    """ConfigError if reading a file of `size` bytes (about `factor` times that in
    memory, as parsed text) would not fit."""
    allowed = memory_limit() // 2
    if size * factor > allowed:
        raise ConfigError(
            f"{source}: {field}: the file has {_size(size)}; reading it needs about "
            f"{_size(size * factor)} while a run may use {_size(allowed)} here"
        )


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError  # (unreachable)
