"""Input limits. Memory budgets: declared counts are checked against the machine before
anything is allocated, so a typo of a few zeros is a one-line error instead of a crash.
Magnitudes: every real number a scenario or a data file gives lies within
±`MAX_MAGNITUDE`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from recourse_sim.errors import ConfigError

# bytes a person's row costs while a round runs, per feature (features, reports, true
# values, changes, gradients, copies) and besides (scores, decisions, people.csv text)
BYTES_PER_FEATURE = 8 * 16
BYTES_PER_ROW = 400
# a person of a CSV world's `population: file`, besides the features: the file's parsed
# cells, the oracle's and the learner's copies (measured: 1.4 KB a row at 2 features,
# from the peak memory of a one-round run on 20,000 and 200,000 rows)
BYTES_PER_FILE_PERSON = 2048

# bytes of a people.csv row (a school run's rows average 61), and per feature of
# --people-features (a true value and a report)
BYTES_PER_PEOPLE_ROW = 64
BYTES_PER_PEOPLE_FEATURE = 24

# Classes a label may have: each class adds a row of model parameters, and a multinomial
# logistic model's Hessian grows with the square of their number (10^4 classes of one
# feature: 3.2 GB; 10^5: 320 GB)
MAX_CLASSES = 1_000

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


def rows_over_budget(
    n: int, d: int, what: str = "rows", row_bytes: int = BYTES_PER_ROW
) -> str | None:
    """Why `n` rows of `d` features will not fit (more than half the memory this process
    may use: the rest is the interpreter, torch and the model), or None if they do.
    `row_bytes`: a row's cost besides its features."""
    need = n * (d * BYTES_PER_FEATURE + row_bytes)
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


def check_classes(n: int, field: str) -> None:
    """ConfigError naming `field` if a label has more than `MAX_CLASSES` classes (checked
    before any model is built)."""
    if n > MAX_CLASSES:
        raise ConfigError(
            f"{field}: {n:,} classes; a label may have at most {MAX_CLASSES:,} (each class "
            "is a row of model parameters)"
        )


def free_disk(path: Path) -> int:
    """Bytes free on the file system that holds `path` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def check_outputs(rounds: int, people: int, d: int, out: Path, field: str) -> None:
    """ConfigError naming `field` if the people.csv of `rounds` rounds of `people`
    applicants (`d` feature columns more per row, 0 without them) would not fit on the
    disk that holds `out`: refused before the first round instead of filling the disk."""
    need = rounds * people * (BYTES_PER_PEOPLE_ROW + d * BYTES_PER_PEOPLE_FEATURE)
    free = free_disk(out)
    if need > free:
        raise ConfigError(
            f"{field}: {rounds:,} rounds of {people:,} people write a people.csv of about "
            f"{_size(need)} while {_size(free)} is free where it goes ({out}); lower it"
        )


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError  # (unreachable)
