"""Reading and atomically writing the project's files.

Every output goes through `atomic_write`: the bytes land in a temporary file
beside the target, which is then renamed over it, so a crash never leaves a
half-written placement behind and a reader never sees one. `refuse_overwrite`
guards a user's input from being clobbered by an output path.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError


def _is_gzip(path: Path) -> bool:
    return path.suffix == ".gz"


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when the name ends in ``.gz``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory, expected a file") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if _is_gzip(p) or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"{p}: not a valid gzip file ({exc})") from None
    return raw


def read_text(path: str | os.PathLike) -> str:
    p = Path(path)
    try:
        return read_bytes(p).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (byte {exc.start})") from None


def read_json(path: str | os.PathLike) -> Any:
    """Parsed JSON; an error names the file, line and column."""
    p = Path(path)
    text = read_text(p)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A name ending in ``.gz`` is gzip-compressed (with a zero mtime, so the
    same content gives the same bytes).
    """
    p = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if _is_gzip(p):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    directory = p.parent if str(p.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, _default_mode(p))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return p


def _default_mode(target: Path) -> int:
    """Keep an existing file's mode; otherwise 0666 less the umask, as open() would."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = None) -> Path:
    text = json.dumps(obj, indent=indent, separators=(",", ": ") if indent else (",", ":"))
    return atomic_write(path, text + "\n")


def refuse_overwrite(output: str | os.PathLike, *inputs: str | os.PathLike | None) -> None:
    """Raise if ``output`` names the same file as one of ``inputs``."""
    out = Path(output)
    for inp in inputs:
        if inp is None:
            continue
        q = Path(inp)
        try:
            same = out.exists() and q.exists() and os.path.samefile(out, q)
        except OSError:
            same = False
        if same or out.resolve() == q.resolve():
            raise InputError(f"{out}: refusing to overwrite the input file {q}; choose another output path")
