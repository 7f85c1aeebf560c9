"""Reading and atomically writing the project's files.

Every output goes through `atomic_write`: the bytes land in a temporary file
beside the target, which is then renamed over it, so a crash never leaves a
half-written placement behind and a reader never sees one. Inside an
`output_transaction` the renames wait until the block ends without an
error, so a command's outputs appear together or not at all.
An output that already exists and is not a regular file (``/dev/null``,
``/dev/stdout``, a FIFO) is written through, never replaced, after every
regular output has landed; an output that is a symbolic link has the file it
points to replaced, the link kept. `check_writable` fails early, before the
work, when an output's place cannot take a file; `refuse_overwrite` guards a
user's input from being clobbered by an output path. A write that fails is an `OutputError` naming the output, never
the temporary file.
"""

from __future__ import annotations

import contextvars
import fcntl
import gc
import gzip
import json
import math
import os
import re
import stat
import sys
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .errors import InputError, OutputError, check_interrupt


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
        except (OSError, EOFError, zlib.error) as exc:      # zlib's: a damaged deflate stream
            raise InputError(f"{p}: not a valid gzip file ({exc})") from None
    return raw


def read_head(path: str | os.PathLike, n: int) -> bytes:
    """The first ``n`` bytes of the file, gunzipped as `read_bytes` does, without reading the rest (telling a
    200k-op graph file's format read and gunzipped it whole); b"" where that fails, for its reader to say why."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(n)
            if _is_gzip(p) or raw[:2] == b"\x1f\x8b":
                fh.seek(0)
                raw = gzip.GzipFile(fileobj=fh).read(n)
    except (OSError, EOFError, zlib.error):
        return b""
    return raw


def read_text(path: str | os.PathLike) -> str:
    p = Path(path)
    try:
        return read_bytes(p).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (byte {exc.start})") from None


@contextmanager
def paused_gc() -> Iterator[None]:
    """Run the block without the cyclic garbage collector (restored afterwards when it was on).

    For building millions of small containers that make no cycles (a large graph file's parse and
    its columns): each collection would walk all of them again, a third of the time of the build.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; a key given twice is `_DuplicateKey` (json would keep the last silently)."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        name = d.get("name")
        raise _DuplicateKey(f"the key {key!r} appears twice in one object"
                            + (f" (the one named {name!r})" if isinstance(name, str) and key != "name" else ""))
    return d


UNIQUE_KEYS_UP_TO = 16 << 20
"""Texts up to this many characters are read checking that no object repeats a key (`read_json`). The check
runs a Python call per object, which makes parsing about 1.5x slower: 0.35 s more on a 200k-op graph of
66 MB. Larger texts (graph files of over about 50k ops, which pardnn and its frontends write) are read
unchecked, the last of two equal keys counting, as JSON readers do."""


def read_json(path: str | os.PathLike) -> Any:
    """Parsed JSON; an error names the file, line and column. A key given twice in one object is an error
    (``{"memory_bytes": 1024, "memory_bytes": null}`` would otherwise mean the last without a word), in texts
    up to `UNIQUE_KEYS_UP_TO` characters."""
    p = Path(path)
    return parse_json(read_text(p), p)


class _NonFinite(Exception):
    pass


def _constant(token: str) -> float:
    """``NaN``, ``Infinity`` and ``-Infinity``, which Python's json reads but JSON (RFC 8259) has not."""
    raise _NonFinite(token)


def _finite_float(token: str) -> float:
    v = float(token)
    if v in (math.inf, -math.inf):          # 1e400: json would read it as infinity
        raise _NonFinite(token)
    return v


def _place(text: str, token: str) -> str:
    """``line L column C`` of the first ``token`` outside a string of ``text`` (the error path only)."""
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|(?<![\w.+-])(' + re.escape(token) + r')(?![\w.])', text):
        if m.group(1) is not None:
            i = m.start(1)
            line = text.count("\n", 0, i) + 1
            return f"line {line} column {i - (text.rfind(chr(10), 0, i) + 1) + 1}"
    return "somewhere"


def parse_json(text: str, p: Path) -> Any:
    """`read_json` of ``text``, already read from ``p`` (its errors name ``p``). ``NaN``, ``Infinity`` and
    numbers beyond a float's range (``1e400``) are errors: JSON has no such numbers, so a file holding them
    is not JSON, and a graph's unknown fields holding them would be written back as such."""
    try:
        with paused_gc():
            return json.loads(text, object_pairs_hook=_unique_keys if len(text) <= UNIQUE_KEYS_UP_TO else None,
                              parse_constant=_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except _NonFinite as exc:
        token = str(exc)
        what = "is not a number in JSON" if token.lstrip("-") in ("NaN", "Infinity") else \
            "is beyond the range of a double-precision number"
        raise InputError(f"{p}: invalid JSON at {_place(text, token)}: {token} {what}") from None
    except _DuplicateKey as exc:
        raise InputError(f"{p}: invalid JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"{p}: malformed JSON: arrays or objects nested too deeply") from None
    except ValueError as exc:       # Python's limit on an integer's digits (4300), which json.loads meets
        raise InputError(f"{p}: invalid JSON: a number of more digits than can be read "
                         f"({str(exc).split(';')[0]})") from None


@dataclass
class _Staged:
    """Outputs written to temporary files whose renames wait for the transaction's end."""

    files: list[tuple[str, Path]] = field(default_factory=list)
    """``(temporary file, target)`` in write order."""
    made_dirs: list[Path] = field(default_factory=list)
    """Directories created for the outputs, outermost first (removed again on failure when empty)."""
    streams: list[tuple[bytes, Path]] = field(default_factory=list)
    """``(data, target)`` for targets that are not regular files (`is_stream`), written after the renames."""


_FD_LINK = re.compile(r"^/(?:proc/(?:self|thread-self|\d+)|dev)/fd/(\d+)$")


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_descriptors() -> dict[int, tuple[int, int]]:
    """This process's open descriptors with what each refers to (device, inode)."""
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3))
    out = {}
    for fd in fds:
        ident = _identity(fd)
        if ident is not None:
            out[fd] = ident
    return out


_GIVEN = _open_descriptors()
"""The descriptors open when pardnn was loaded (those a shell gave, as ``1>``, ``3>``), with what each
referred to: ``-o /dev/fd/N`` may name only one of these, still referring to the same file."""
_MOVED: dict[int, int] = {}
"""Descriptor N's original, where the program pointed N elsewhere and kept the original as a duplicate
(`moved_descriptor`)."""


def moved_descriptor(fd: int, keep: int) -> None:
    """Record that descriptor ``fd``'s original now lives on as ``keep`` (the CLI quiets native logging by
    pointing descriptor 2 at a discarded file): ``-o /dev/stderr`` then writes to ``keep``."""
    _MOVED[fd] = keep


def _fd_alias(path: Path) -> int | None:
    """N when ``path`` is ``/dev/fd/N``, ``/proc/self/fd/N`` (or of this process's id, or thread-self), or a
    link to one (``/dev/stdout``); else None."""
    q = os.path.abspath(path)
    for _ in range(40):
        m = _FD_LINK.match(q)
        if m and (q.startswith(("/dev/", "/proc/self/", "/proc/thread-self/"))
                  or q.split("/")[2] == str(os.getpid())):
            return int(m.group(1))
        if not os.path.islink(q):
            return None
        q = os.path.normpath(os.path.join(os.path.dirname(q), os.readlink(q)))
    return None


def _own_fd(path: Path) -> int | None:
    """The descriptor to write for ``path`` when it names one of this process's (``/dev/stdout``), else
    None. Only a descriptor the process was given and that still refers to the same file qualifies: a
    number that was closed (``1>&-``) may since hold a file pardnn opened for itself."""
    n = _fd_alias(path)
    if n is None:
        return None
    fd = _MOVED.get(n, n)
    closed = (n == 1 and sys.__stdout__ is None) or (n == 2 and sys.__stderr__ is None)
    if closed or n not in _GIVEN or _identity(fd) != _GIVEN[n]:
        raise OutputError(f"{path}: cannot write: descriptor {n} was not open when pardnn started")
    return fd


def is_stream(path: Path) -> bool:
    """Whether ``path`` names one of this process's descriptors (``/dev/stdout``), or (its links followed)
    exists and is neither a regular file nor a directory: a device such as ``/dev/null``, a FIFO or a socket.
    Such an output is written through, never replaced."""
    if _own_fd(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def names_stdout(path: str | Path | None) -> bool:
    """Whether writing ``path`` writes what this process's standard output shows: ``/dev/stdout`` (or
    ``/dev/fd/1``, ``/proc/self/fd/1``, a link to one), or a stream that is the same file as descriptor 1 (the
    terminal, the pipe). A command that writes such an output prints its human summary on stderr instead,
    so that the output reaches the reader whole (``pardnn partition g.json -o /dev/stdout | jq``)."""
    if path is None:
        return False
    path = Path(path)
    if _fd_alias(path) == 1:
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) and _identity(1) == (st.st_dev, st.st_ino)


def _real(path: Path) -> Path:
    """The file a rename must replace: the end of ``path``'s links (the links themselves are kept). A loop
    of links is an error, as for the shell; a dangling link names the file to make."""
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or type(exc).__name__}") from None
    except RuntimeError:        # Python 3.11-3.12 report a loop so
        raise OutputError(f"{path}: cannot write: Too many levels of symbolic links") from None


def _open_through(target: Path):
    """``target`` opened for writing through: ``(descriptor, file or None)``. A FIFO's open waits for a
    reader, so in a transaction every stream is opened before the first rename."""
    fd = _own_fd(target)
    if fd is not None:
        return fd, None
    fh = open(target, "wb")     # noqa: SIM115 - closed by _write_opened
    return fh.fileno(), fh


def _write_opened(handle, data: bytes, target: Path) -> None:
    """Write ``data`` through ``handle`` (`_open_through`'s) and close what was opened. When ``target`` is
    this process's stdout (`names_stdout`) and its reader has gone (``-o /dev/stdout | head -c 50``), the
    rest of the output is dropped and stdout is pointed at the null device, as a reader that stops early
    asks; it is no error, and the command goes on (its summary on stderr, its exit code its own)."""
    fd, fh = handle
    try:
        # our own descriptor (-o /dev/stdout) is written at its place in what the command prints, after
        # what Python has buffered, not by opening the path again (which would start a file that stdout is
        # redirected to over from its beginning)
        if fh is None:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (AttributeError, OSError, ValueError):
                    pass
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except BrokenPipeError:
            if not names_stdout(target):
                raise
            _silence(fd)
    finally:
        if fh is not None:
            fh.close()


def _silence(fd: int) -> None:
    """Point descriptor ``fd`` (stdout, whose reader has gone) at the null device."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _close_opened(handles) -> None:
    for _, fh in handles:
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass


_STAGED: contextvars.ContextVar[_Staged | None] = contextvars.ContextVar("pardnn_staged_outputs", default=None)


@contextmanager
def output_transaction() -> Iterator[None]:
    """Every `atomic_write` in the block lands together when the block succeeds, or not at all.

    Each write goes to its temporary file at once (so a full disk fails
    inside the block); the renames happen at the end. On an exception the
    temporary files, and directories made for them, are removed and no
    output appears. Nested blocks join the outer one.
    """
    if _STAGED.get() is not None:
        yield
        return
    staged = _Staged()
    token = _STAGED.set(staged)
    try:
        yield
    except BaseException:
        _STAGED.reset(token)
        _discard(staged)
        raise
    _STAGED.reset(token)
    _commit(staged)


def _commit(staged: _Staged) -> None:
    """Rename every staged file over its target; on a failure, or a Ctrl-C (also one that something
    swallowed, noticed before the renames and again before the old contents' backups are dropped), put
    every target back as it was and remove what was staged."""
    done: list[tuple[Path, str | None]] = []     # (target, its previous content's backup or None)
    i = 0
    opened: list = []
    try:
        check_interrupt()
        for data, target in staged.streams:     # opened first: a FIFO waits here for its reader, before any rename
            try:
                opened.append(_open_through(target))
            except OSError as exc:
                raise _StreamFailure(target, exc) from None
        check_interrupt()
        for i, (tmp, target) in enumerate(staged.files):
            spare = backup = None       # the backup's file, and once the old content is in it, the backup
            moved = False
            try:
                if target.exists() and not target.is_dir():
                    fd, spare = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
                    os.close(fd)
                    os.replace(target, spare)
                    backup = spare
                os.replace(tmp, target)
                moved = True
                done.append((target, backup))
            except BaseException:       # undo this file's own steps (the earlier files' are undone below)
                if not done or done[-1][0] is not target:
                    if backup is not None:
                        os.replace(backup, target)
                    elif moved:
                        target.unlink(missing_ok=True)
                    elif spare is not None:
                        Path(spare).unlink(missing_ok=True)
                raise
        i = len(staged.files)
        check_interrupt()
        for handle, (data, target) in zip(opened, staged.streams):     # cannot be undone: after every rename
            try:
                _write_opened(handle, data, target)
            except OSError as exc:
                raise _StreamFailure(target, exc) from None
    except BaseException as exc:
        _close_opened(opened)       # (closing one `_write_opened` closed is harmless)
        for earlier, old in reversed(done):
            if old is None:
                earlier.unlink(missing_ok=True)
            else:
                os.replace(old, earlier)
        _discard(_Staged(staged.files[i:], staged.made_dirs))
        if isinstance(exc, _StreamFailure):
            raise _failure(exc.target, exc.error) from None
        if isinstance(exc, OSError):
            raise _failure(staged.files[i][1], exc) from None
        raise
    for _, old in done:
        if old is not None:
            Path(old).unlink(missing_ok=True)


class _StreamFailure(Exception):
    def __init__(self, target: Path, error: OSError):
        super().__init__(str(error))
        self.target, self.error = target, error


def _discard(staged: _Staged) -> None:
    for tmp, _ in staged.files:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    for d in reversed(staged.made_dirs):
        try:
            d.rmdir()
        except OSError:
            pass


def _failure(target: Path, exc: OSError) -> OutputError:
    reason = exc.strerror or type(exc).__name__
    if isinstance(exc, (FileExistsError, NotADirectoryError)):    # a path component is a file
        parent = _nearest_existing(target.parent)
        if parent is not None and not parent.is_dir():
            reason = f"{parent} is not a directory"
    return OutputError(f"{target}: cannot write: {reason}")


def _nearest_existing(p: Path) -> Path | None:
    """``p`` or its nearest ancestor that exists (a file or a directory)."""
    p = Path(os.path.abspath(p))
    for q in (p, *p.parents):
        if q.exists() or q.is_symlink():
            return q
    return None


def _make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing ancestors; the ones made, outermost first."""
    missing = []
    q = Path(os.path.abspath(directory))
    while not q.exists():
        missing.append(q)
        if q.parent == q:
            break
        q = q.parent
    made = []
    for d in reversed(missing):
        d.mkdir()
        made.append(d)
    return made


@contextmanager
def parents_made(directory: str | os.PathLike) -> Iterator[None]:
    """Create ``directory`` and its missing ancestors for the block (unless a Ctrl-C came already, also one
    something swallowed: `check_interrupt`); if the block fails, remove again the ones made that are still
    empty. For outputs that are not `atomic_write`'s files (a SavedModel directory, renamed into place at
    the end of the block)."""
    check_interrupt()
    made = _make_parents(Path(directory))
    try:
        yield
    except BaseException:
        _discard(_Staged([], made))
        raise


def check_writable(*paths: str | os.PathLike | None, directory_ok: bool = False) -> None:
    """Fail now, before any work, when an output cannot be written where it is asked for.

    Each path's nearest existing ancestor must be a directory that accepts a
    new file (probed by creating and removing one, which also catches
    read-only and special filesystems). Nothing is left behind. With
    ``directory_ok`` an output may be a directory (a SavedModel).
    """
    for path in paths:
        if path is None:
            continue
        try:
            _check_writable(Path(path), directory_ok)
        except OSError as exc:      # a directory on the way that may not be searched, a name too long
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _check_writable(target: Path, directory_ok: bool) -> None:
    if target.is_dir() and not directory_ok:
        raise OutputError(f"{target}: cannot write: is a directory, expected a file name")
    if is_stream(target):       # /dev/null, a FIFO: written through, so it must take writes itself
        _check_stream(target)
        return
    shown, target = target, _real(target)   # a link: the file it points to is replaced, beside that file
    base = _nearest_existing(target.parent)
    if base is None or not base.is_dir():
        raise OutputError(f"{shown}: cannot write: {base or target.parent} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".pardnn-probe.", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{shown}: cannot write in {base}: {exc.strerror or type(exc).__name__}") from None


def check_new_directory(path: str | os.PathLike) -> None:
    """A directory output (a SavedModel) must be new or empty: fail now, before any work."""
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputError(f"{out}: already exists; choose a new directory for the placed SavedModel")


def _check_stream(path: Path) -> None:
    """An output written through must take writes: one of our descriptors open for writing, or a device or
    FIFO we may write (a socket cannot be opened as a file)."""
    fd = _own_fd(path)
    if fd is not None:
        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {exc.strerror or type(exc).__name__}") from None
        if mode not in (os.O_WRONLY, os.O_RDWR):
            raise OutputError(f"{path}: cannot write: descriptor {_fd_alias(path)} is open for reading only")
        return
    if stat.S_ISSOCK(os.stat(path).st_mode):
        raise OutputError(f"{path}: cannot write: is a socket")
    if not os.access(path, os.W_OK):
        raise OutputError(f"{path}: cannot write: Permission denied")


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A name ending in ``.gz`` is gzip-compressed (with a zero mtime, so the
    same content gives the same bytes). A ``path`` that is a device, FIFO or
    socket (`is_stream`) is written through instead (in a transaction, after
    every rename); a symbolic link keeps pointing where it did, at new
    content. Returns ``path`` as given.
    """
    shown = p = Path(path)
    if isinstance(data, str):   # a lone surrogate (a name "a\\ud800" from JSON) as its escape: it was an internal error
        data = data.encode("utf-8", "backslashreplace")
    if _is_gzip(p):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    staged = _STAGED.get()
    if is_stream(p):
        check_interrupt()
        if staged is not None:
            staged.streams.append((data, p))
            return p
        try:
            _write_opened(_open_through(p), data, p)
        except OSError as exc:
            raise _failure(p, exc) from None
        return p
    p = _real(p)
    directory = p.parent if str(p.parent) else Path(".")
    tmp = None
    made: list[Path] = []
    try:
        check_interrupt()   # a Ctrl-C that something swallowed (a callback, a finaliser): nothing is made
        made = _make_parents(directory)
        if staged is not None:
            staged.made_dirs.extend(made)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
        os.chmod(tmp, _default_mode(p))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if p.is_dir():
            raise IsADirectoryError(21, "is a directory, expected a file name")
        if staged is not None:
            staged.files.append((tmp, p))
            return shown
        check_interrupt()
        os.replace(tmp, p)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if staged is None:      # the directories made for it (a transaction removes its own at its end)
            _discard(_Staged([], made))
        if isinstance(exc, OSError):
            raise _failure(shown, exc) from None
        raise
    return shown


def _default_mode(target: Path) -> int:
    """Keep an existing file's mode; otherwise 0666 less the umask, as open() would."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = None) -> Path:
    text = json.dumps(obj, indent=indent, separators=(",", ": ") if indent else (",", ":"), allow_nan=False)
    return atomic_write(path, text + "\n")


def refuse_overwrite(output: str | os.PathLike, *inputs: str | os.PathLike | None) -> None:
    """Raise if ``output`` names a file one of ``inputs`` consists of: the input itself, a file of an input
    model directory (`_model_file`: a SavedModel's ``saved_model.pb`` and variables, the ``.onnx`` files and
    checkpoint of onnxruntime-training artifacts; other files there, such as an earlier output, may be
    replaced), or the external data of an ONNX input (the files its tensors name). An output written
    through, such as ``/dev/stdout`` on the terminal that is also stdin, overwrites no file."""
    out = Path(output)
    if is_stream(out):
        return
    real_out = os.path.realpath(out)    # (realpath: a loop of links is no error here; writing it is)
    for inp in inputs:
        if inp is None:
            continue
        q = Path(inp)
        try:
            same = out.exists() and q.exists() and os.path.samefile(out, q)
        except OSError:
            same = False
        if same or real_out == os.path.realpath(q):
            raise InputError(f"{out}: refusing to overwrite the input file {q}; choose another output path")
        if os.path.isdir(q):
            if _model_file(os.path.realpath(q), real_out):
                raise InputError(f"{out}: refusing to overwrite a file of the input {q}; choose another output path")
        elif q.name.lower().endswith(".onnx"):
            loc = _external_data_named(q, real_out)
            if loc is not None:
                raise InputError(f"{out}: refusing to overwrite {loc}, the external data of the input {q}; "
                                 "choose another output path")


_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "checkpoint")
_MODEL_DIRS = ("variables", "assets", "assets.extra")


def _model_file(directory: str, path: str) -> bool:
    """Whether the real path ``path`` is a file the model in the real ``directory`` is made of: a
    SavedModel's graph, fingerprint and anything under its variables and assets, or onnxruntime-training
    artifacts' ``.onnx`` files, their checkpoint and the external data those name."""
    if os.path.commonpath([path, directory]) != directory or path == directory:
        return False
    parts = Path(os.path.relpath(path, directory)).parts
    if parts[0] in _MODEL_DIRS or (len(parts) == 1 and (parts[0] in _MODEL_FILES
                                                         or parts[0].lower().endswith(".onnx"))):
        return True
    return any(_external_data_named(Path(directory) / name, path) is not None
               for name in sorted(os.listdir(directory)) if name.lower().endswith(".onnx"))


def _external_data_named(model: Path, real_path: str) -> str | None:
    """The location under which ONNX ``model`` names ``real_path`` as external data, else None. Locations are
    relative to the folder the model is read from (a link's own, as onnx reads it), and only a path under
    that folder can be one, so the model's bytes are read only then."""
    base = os.path.realpath(model.parent)
    if os.path.commonpath([real_path, base]) != base:
        return None
    for loc in onnx_external_locations(model):
        if os.path.realpath(os.path.join(model.parent, loc)) == real_path:
            return loc
    return None


_LOCATION = b"\x0a\x08location\x12"
"""An ONNX ``StringStringEntryProto`` whose key is ``location`` (field 1, 8 bytes), up to its value's
length: how a tensor names the file that holds its data (`onnx.external_data_helper`)."""


def onnx_external_locations(path: str | os.PathLike) -> list[str]:
    """The external data files an ONNX model names (relative to its directory), read from the protobuf's
    bytes without the ``onnx`` package; [] when the file cannot be read (its reader will say why)."""
    import mmap

    out: set[str] = set()
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            i = m.find(_LOCATION)
            while i >= 0:
                j, n, shift = i + len(_LOCATION), 0, 0
                while j < len(m) and shift < 35:      # the value's length, a varint
                    b = m[j]
                    n |= (b & 0x7F) << shift
                    j += 1
                    shift += 7
                    if not b & 0x80:
                        break
                name = m[j:j + n].decode("utf-8", "replace")
                if name and "\x00" not in name:      # (a path cannot hold NUL; such bytes are no location)
                    out.add(name)
                i = m.find(_LOCATION, j + n)
    except (OSError, ValueError):      # (ValueError: an empty file cannot be mapped)
        return []
    return sorted(out)
