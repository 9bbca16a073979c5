"""Access to the data files shipped inside the package.

Every loader reads its files through `open_data_file`, which checks the file
against `files/SHA256SUMS` first, so a missing, truncated or altered file
raises `DataError` naming that file instead of silently changing row counts.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import io
import zlib
from collections.abc import Iterator
from importlib.resources import files
from typing import TYPE_CHECKING

from recourse_sim.errors import DataError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

CHECKSUMS_FILE = "SHA256SUMS"


def files_root() -> Traversable:
    """Folder holding the bundled data files (tests point this elsewhere)."""
    return files("recourse_sim.data") / "files"


def _read_bytes(name: str) -> bytes:
    path = files_root() / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"data file {name!r} is missing (looked in {files_root()})") from None
    except OSError as exc:
        raise DataError(f"data file {name!r} cannot be read: {exc}") from None


@functools.lru_cache(maxsize=1)
def _expected_checksums() -> dict[str, str]:
    text = _read_bytes(CHECKSUMS_FILE).decode("ascii", errors="replace")
    sums = {}
    for line in text.splitlines():
        digest, _, name = line.strip().partition("  ")
        if len(digest) != 64 or not name:
            raise DataError(f"data file {CHECKSUMS_FILE!r} is corrupt: bad line {line!r}")
        sums[name] = digest
    return sums


def read_verified(name: str) -> bytes:
    """Raw bytes of a bundled file, after checking its SHA-256 digest."""
    expected = _expected_checksums().get(name)
    if expected is None:
        raise DataError(f"data file {name!r} has no checksum in {CHECKSUMS_FILE!r}")
    data = _read_bytes(name)
    if hashlib.sha256(data).hexdigest() != expected:
        raise DataError(f"data file {name!r} is corrupt (SHA-256 does not match {CHECKSUMS_FILE})")
    return data


@contextlib.contextmanager
def open_data_file(name: str) -> Iterator[io.BytesIO]:
    """Verified contents of a bundled file as a binary stream, gunzipped if it ends in .gz.

    Any error raised while the caller parses the stream becomes a `DataError`
    naming the file: a file that passes its checksum but still fails to parse
    is as broken for the user as a missing one.
    """
    data = read_verified(name)
    try:
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        yield io.BytesIO(data)
    except DataError:
        raise
    except (OSError, EOFError, zlib.error, ValueError, KeyError, IndexError, TypeError) as exc:
        raise DataError(f"data file {name!r} is corrupt: {type(exc).__name__}: {exc}") from None


def clear_checksum_cache() -> None:
    """Forget the parsed checksum list (after pointing `files_root` elsewhere)."""
    _expected_checksums.cache_clear()
