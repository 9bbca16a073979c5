"""Durable files: atomic replacement and checkpoints that never unpickle.

A checkpoint is two files in one directory:

* ``state-<round>.npz`` — every numpy array of the state, saved and loaded with
  ``allow_pickle=False`` (object arrays are refused when saving);
* ``checkpoint.json`` — the commit record: format, version, round number, the rest
  of the state as JSON (arrays replaced by references into the ``.npz``), caller
  metadata, the SHA-256 of the ``.npz`` bytes and a SHA-256 of the record itself.

Writing goes ``.npz`` first, then ``checkpoint.json``, each through a temporary file
that is fsynced and then ``os.replace``-d into place, and only then are older ``.npz``
files deleted. A crash at any point therefore leaves either the previous checkpoint or
the new one, never a mixture. Loading verifies both digests before decoding anything,
so a truncated or bit-flipped checkpoint raises `CheckpointError` naming the file
instead of being half-loaded.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import secrets
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recourse_sim.errors import CheckpointError, ConfigError, RecourseSimError

__all__ = [
    "CHECKPOINT_FILE",
    "Checkpoint",
    "atomic_write_bytes",
    "atomic_write_text",
    "load_checkpoint",
    "make_dir",
    "open_dir",
    "open_file",
    "read_bounded",
    "refuse_link",
    "remove_checkpoint_files",
    "save_checkpoint",
]

CHECKPOINT_FILE = "checkpoint.json"
"""Name of the commit record inside a checkpoint directory."""

MAX_JSON_BYTES = 64_000_000
"""Largest ``checkpoint.json`` read (one holds a few kilobytes plus random-stream states)."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of a ``checkpoint.json`` accepted (a state tree nests about 6 deep)."""

_FORMAT = "recourse-sim-checkpoint"
_VERSION = 1

# Tags of the JSON encoding of a state tree. A dict whose keys include a tag (or are
# not all strings) is written in the "__dict__" form, so decoding is unambiguous.
_ARRAY, _SCALAR, _TUPLE, _DICT = "__ndarray__", "__npscalar__", "__tuple__", "__dict__"
_TAGS = frozenset({_ARRAY, _SCALAR, _TUPLE, _DICT})


@dataclass(frozen=True)
class Checkpoint:
    """A loaded, verified checkpoint."""

    round: int
    """Number of rounds completed when the checkpoint was taken."""
    state: dict[str, Any]
    """The state tree exactly as it was saved (arrays, numpy scalars, tuples restored)."""
    meta: dict[str, Any]
    """The caller's JSON metadata (run identity, metrics-file position, ...)."""
    path: Path
    """The ``checkpoint.json`` this was read from (for error messages)."""


# --------------------------------------------------------------------------- atomic files


# Everything a run, sweep or plot writes, appends to or deletes in its directory goes
# through these: no symbolic link is followed at the file or at the directory holding it,
# so a link planted in a run directory cannot make a run change a file elsewhere.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_AT_DIRECTORY = os.open in os.supports_dir_fd  # (not on Windows: plain paths there)


def _link_error(path: str | os.PathLike[str]) -> ConfigError:
    return ConfigError(
        f"{path} is a symbolic link; refused (recourse-sim never writes through a link: "
        "remove it or choose another directory)"
    )


def refuse_link(path: str | os.PathLike[str]) -> None:
    """ConfigError naming `path` if it is a symbolic link (nothing is written through one)."""
    if os.path.islink(path):
        raise _link_error(path)


def make_dir(path: str | os.PathLike[str]) -> Path:
    """Create directory `path` (and its parents) unless it exists; ConfigError naming it
    if it is a symbolic link or cannot be created."""
    path = Path(path)
    refuse_link(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create directory {path}: {e.strerror or e}") from None
    refuse_link(path)
    return path


def open_dir(path: str | os.PathLike[str]) -> int | None:
    """A descriptor of directory `path`, opened without following a link there (close it);
    None where directories cannot be opened (Windows)."""
    if not _AT_DIRECTORY:
        refuse_link(path)
        return None
    try:
        return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    except OSError as e:
        refuse_link(path)
        raise OSError(e.errno, e.strerror, str(path)) from None


def open_file(path: str | os.PathLike[str], flags: int, dir_fd: int | None = None) -> int:
    """``os.open(path, flags)`` refusing a symbolic link at `path` (ConfigError naming it);
    with `dir_fd`, `path` is a name inside that directory."""
    try:
        return os.open(path, flags | _NOFOLLOW, 0o666, dir_fd=dir_fd)  # (as open(): umask)
    except OSError as e:
        if e.errno == errno.ELOOP or _is_link(path, dir_fd):
            raise _link_error(path) from None
        raise OSError(e.errno, e.strerror, str(path)) from None


def _is_link(name: str | os.PathLike[str], dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _fsync_dir(directory: Path | int) -> None:
    """Make a rename in `directory` (a path or an open descriptor) durable (a no-op where
    directories cannot be opened)."""
    if isinstance(directory, int):
        with contextlib.suppress(OSError):
            os.fsync(directory)
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows: directories cannot be opened; rename is durable enough
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a part.

    The bytes go to a new temporary file in the same directory, are flushed and fsynced,
    and the temporary file is then renamed over `path` (``os.replace`` is atomic on POSIX
    and Windows); the directory is fsynced so the rename survives a power cut. The
    directory is opened once without following a link and every step happens inside it;
    a symbolic link at `path` or at its directory is refused (ConfigError naming it).
    """
    path = Path(path)
    dir_fd = open_dir(path.parent)
    # names relative to the verified directory (full paths where it cannot be opened)
    target = path.name if dir_fd is not None else str(path)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    tmp = tmp if dir_fd is not None else str(path.parent / tmp)
    try:
        if _is_link(target, dir_fd):
            raise _link_error(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        try:
            # 0o666 as open() would: the kernel applies the user's umask, so the file
            # gets the permissions any file the user writes gets (and keeps them)
            fd = os.open(tmp, flags | _NOFOLLOW, 0o666, dir_fd=dir_fd)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from e
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as e:  # name the file: a failed write() does not
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise OSError(e.errno, e.strerror, str(path)) from e
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        _fsync_dir(path.parent if dir_fd is None else dir_fd)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text (newlines written as ``\\n`` on every platform)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_bounded(
    path: str | os.PathLike[str],
    limit: int,
    what: str,
    error: type[RecourseSimError] = CheckpointError,
) -> bytes:
    """The bytes of regular file `path`, refused with `error` (one line naming `path` as
    `what`) if it is missing, not a regular file (a FIFO or device would block or never
    end) or larger than `limit` bytes; never reads more than ``limit + 1`` bytes."""
    path = Path(path)
    try:
        with open(path, "rb", opener=_open_nonblocking) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise error(f"{path}: {what} is not a regular file")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except OSError as e:
        raise error(f"{path}: cannot read {what} ({e.strerror or e})") from None
    if len(data) > limit:
        raise error(f"{path}: {what} is larger than {limit} bytes; refused")
    return data


def _open_nonblocking(path: str, flags: int) -> int:
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of hanging
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _json_depth(raw: bytes) -> int:
    """Deepest nesting of brackets in JSON text `raw` (strings skipped), without parsing."""
    brackets = np.frombuffer(re.sub(rb"[^\[\]{}]", b"", _JSON_STRING.sub(b"", raw)), np.uint8)
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


# --------------------------------------------------------------------------- state encoding


def _encode(value: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    """JSON-able form of `value`; arrays and numpy scalars are moved into `arrays`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(
                f"cannot checkpoint {where}: object arrays would need pickling "
                f"(dtype {array.dtype}); store numbers or strings"
            )
        key = f"a{len(arrays)}"
        arrays[key] = array
        return {_ARRAY if isinstance(value, np.ndarray) else _SCALAR: key}
    if isinstance(value, list):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value) and not _TAGS.intersection(value):
            return {k: _encode(v, arrays, f"{where}[{k!r}]") for k, v in value.items()}
        return {
            _DICT: [
                [_encode(k, arrays, f"{where} key {k!r}"), _encode(v, arrays, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
        }
    raise TypeError(
        f"cannot checkpoint {where} of type {type(value).__name__}: a state holds only numpy "
        "arrays, numbers, strings, None, and lists, tuples and dicts of these"
    )


def _decode(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """Inverse of `_encode`."""
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, body), *_ = value.items()
        if tag == _ARRAY:
            return arrays[body]
        if tag == _SCALAR:
            return arrays[body][()]
        if tag == _TUPLE:
            return tuple(_decode(v, arrays) for v in body)
        if tag == _DICT:
            return {_decode(k, arrays): _decode(v, arrays) for k, v in body}
    return {k: _decode(v, arrays) for k, v in value.items()}


def _digest(record: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of `record` without its own ``sha256`` field."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- save / load


def save_checkpoint(
    directory: str | os.PathLike[str],
    *,
    round: int,
    state: Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Atomically replace the checkpoint in `directory` by (`round`, `state`, `meta`).

    `state` is a tree of numpy arrays, numpy scalars, Python numbers, strings, None,
    lists, tuples and dicts (any hashable keys); anything else (in particular objects
    that would need pickling) raises TypeError naming where it is. `meta` must be
    JSON-serialisable. Returns the path of ``checkpoint.json``.
    """
    directory = make_dir(directory)
    arrays: dict[str, np.ndarray] = {}
    encoded = _encode(dict(state), arrays, "state")

    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    npz_bytes = buffer.getvalue()
    npz_name = f"state-{round:06d}.npz"
    atomic_write_bytes(directory / npz_name, npz_bytes)

    record: dict[str, Any] = {
        "format": _FORMAT,
        "version": _VERSION,
        "round": round,
        "arrays": npz_name,
        "arrays_sha256": hashlib.sha256(npz_bytes).hexdigest(),
        "state": encoded,
        "meta": dict(meta or {}),
    }
    record["sha256"] = _digest(record)
    path = directory / CHECKPOINT_FILE
    atomic_write_text(path, json.dumps(record, indent=1, allow_nan=True) + "\n")

    # Only now is the new .npz committed: older ones, and temporary files of a writer that
    # was killed mid-write, are garbage.
    remove_checkpoint_files(directory, keep=npz_name)
    return path


_STATE_FILE = re.compile(r"state-\d+\.npz|\..*\.tmp")


def remove_checkpoint_files(
    directory: str | os.PathLike[str], keep: str | None = None, record: bool = False
) -> None:
    """Delete checkpoint directory `directory`'s state files (``state-*.npz``) and
    leftover temporary files except `keep`, and first, with `record`, its
    ``checkpoint.json``; only these (the directory may hold a user's files), listed and
    deleted inside the directory opened without following a link (a link in its place
    is refused: ConfigError)."""
    dir_fd = open_dir(directory)

    def remove(name: str) -> None:
        target = name if dir_fd is not None else os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target, dir_fd=dir_fd)

    try:
        if record:  # first: a record must never outlive the state files it names
            remove(CHECKPOINT_FILE)
        for name in os.listdir(directory if dir_fd is None else dir_fd):
            if name != keep and _STATE_FILE.fullmatch(name):
                with contextlib.suppress(OSError):
                    remove(name)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def load_checkpoint(directory: str | os.PathLike[str]) -> Checkpoint | None:
    """Load and verify the checkpoint in `directory`; None if there is none.

    Raises `CheckpointError` naming the file if ``checkpoint.json`` or its ``.npz`` is
    unreadable, truncated, fails its SHA-256 check or is not a recourse-sim checkpoint.
    Nothing is unpickled.
    """
    path = Path(directory) / CHECKPOINT_FILE
    if not os.path.lexists(path):
        return None
    raw = read_bounded(path, MAX_JSON_BYTES, "checkpoint")
    if _json_depth(raw) > MAX_JSON_DEPTH:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: nested deeper than {MAX_JSON_DEPTH} levels"
        )
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated (not valid JSON)") from e
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        raise CheckpointError(f"{path} is not a recourse-sim checkpoint")
    if record.get("version") != _VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {record.get('version')!r}; "
            f"this recourse-sim reads version {_VERSION}"
        )
    if record.get("sha256") != _digest(record):
        raise CheckpointError(f"checkpoint {path} is corrupt: its SHA-256 digest does not match")

    # The digest vouches for these fields, but keep the file name inside the directory.
    npz_name = record.get("arrays")
    if not isinstance(npz_name, str) or Path(npz_name).name != npz_name:
        raise CheckpointError(f"checkpoint {path} names an invalid state file {npz_name!r}")
    npz_path = path.parent / npz_name
    from recourse_sim.budget import memory_limit

    npz_bytes = read_bounded(npz_path, memory_limit() // 2, "checkpoint state")
    if hashlib.sha256(npz_bytes).hexdigest() != record.get("arrays_sha256"):
        raise CheckpointError(
            f"checkpoint state {npz_path} is corrupt: its SHA-256 digest does not match"
        )

    try:
        with np.load(io.BytesIO(npz_bytes), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        state = _decode(record["state"], arrays)
        rounds_done, meta = int(record["round"]), dict(record["meta"])
    except (ValueError, TypeError, KeyError, OSError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"checkpoint {path} cannot be decoded: {e!s:.200}") from e
    if rounds_done < 0:
        raise CheckpointError(f"checkpoint {path} records a negative round ({rounds_done})")
    return Checkpoint(round=rounds_done, state=state, meta=meta, path=path)
