"""Atomic outputs: one file, and several that commit together or not at all."""

from __future__ import annotations

import pytest

from pardnn import fileio
from pardnn.errors import InputError, OutputError
from pardnn.fileio import (atomic_write, check_writable, onnx_external_locations, output_transaction, read_json,
                           refuse_overwrite)


def listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_outputs_of_a_transaction_appear_together(tmp_path):
    with output_transaction():
        atomic_write(tmp_path / "a.json", "1\n")
        atomic_write(tmp_path / "new" / "dir" / "b.txt", "2\n")
        assert not (tmp_path / "a.json").exists() and not (tmp_path / "new" / "dir" / "b.txt").exists()
    assert (tmp_path / "a.json").read_text() == "1\n" and (tmp_path / "new" / "dir" / "b.txt").read_text() == "2\n"
    assert listing(tmp_path) == ["a.json", "new", "new/dir", "new/dir/b.txt"]      # no temporary file left


def test_a_failure_inside_the_block_leaves_nothing(tmp_path):
    (tmp_path / "a.json").write_text("old\n")
    with pytest.raises(RuntimeError):
        with output_transaction():
            atomic_write(tmp_path / "a.json", "new\n")
            atomic_write(tmp_path / "made" / "b.txt", "2\n")
            raise RuntimeError("the report failed")
    assert listing(tmp_path) == ["a.json"] and (tmp_path / "a.json").read_text() == "old\n"


def test_a_failed_rename_puts_the_earlier_outputs_back(tmp_path):
    (tmp_path / "a.json").write_text("old\n")
    with pytest.raises(OutputError, match=r"b\.txt: cannot write"):
        with output_transaction():
            atomic_write(tmp_path / "a.json", "new\n")
            atomic_write(tmp_path / "c.json", "3\n")
            atomic_write(tmp_path / "b.txt", "2\n")
            (tmp_path / "b.txt").mkdir()              # the last target turns into a directory before the renames
            (tmp_path / "b.txt" / "keep").write_text("x")
    assert listing(tmp_path) == ["a.json", "b.txt", "b.txt/keep"]
    assert (tmp_path / "a.json").read_text() == "old\n"


def test_unwritable_places_are_output_errors_naming_the_output(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"f/out\.json: cannot write: .*f is not a directory"):
        check_writable(tmp_path / "f" / "out.json")
    with pytest.raises(OutputError, match=r"f/out\.json: cannot write: .*f is not a directory"):
        atomic_write(tmp_path / "f" / "out.json", "1")
    with pytest.raises(OutputError, match="is a directory"):
        check_writable(tmp_path)
    check_writable(tmp_path, directory_ok=True)
    check_writable(tmp_path / "not" / "yet" / "there.json")
    assert listing(tmp_path) == ["f"]


def test_deeply_nested_json_is_an_input_error(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested too deeply"):
        read_json(p)


def test_a_key_given_twice_in_one_json_object_is_an_input_error(tmp_path):
    """Found by a bad-input trial: json keeps the last of two equal keys, so a cluster file's
    ``"memory_bytes": 1024, "memory_bytes": null`` made the device unlimited without a word."""
    p = tmp_path / "c.json"
    p.write_text('{"devices": [{"name": "gpu0", "memory_bytes": 1024, "memory_bytes": null}]}')
    with pytest.raises(InputError, match=r"c.json: invalid JSON: the key 'memory_bytes' appears twice in one "
                                         r"object \(the one named 'gpu0'\)"):
        read_json(p)
    p.write_text('{"name": "a", "name": "b"}')
    with pytest.raises(InputError, match=r"the key 'name' appears twice in one object$"):
        read_json(p)
    p.write_text('{"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 1}]}')     # equal keys in different objects
    assert read_json(p) == {"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 1}]}
    p.write_text('{"x": 1, "x": 2}' + " " * fileio.UNIQUE_KEYS_UP_TO)      # a text too large to check (docs)
    assert read_json(p) == {"x": 2}


def test_nan_infinity_and_numbers_beyond_a_double_are_no_json(tmp_path):
    """Python's json reads ``NaN``, ``Infinity`` and ``1e400`` (as infinity); JSON has none of them, and a graph's
    unknown fields holding them were written back so by `import`. The error says where; the same words inside
    a string are text. Our own writer refuses to write them."""
    p = tmp_path / "n.json"
    p.write_text('{"s": "NaN Infinity 1e400",\n "a": [1, 2.5, NaN]}')
    with pytest.raises(InputError, match=r"n.json: invalid JSON at line 2 column 16: NaN is not a number in JSON$"):
        read_json(p)
    p.write_text('{"s": "-Infinity", "a": -Infinity}')
    with pytest.raises(InputError, match=r"line 1 column 25: -Infinity is not"):
        read_json(p)
    p.write_text('{"a": 1E400}')
    with pytest.raises(InputError, match=r"line 1 column 7: 1E400 is beyond the range of a double"):
        read_json(p)
    p.write_text('{"a": 1e308, "b": -1e-400, "c": 12345678901234567890}')       # in range, or rounded to 0
    assert read_json(p) == {"a": 1e308, "b": -0.0, "c": 12345678901234567890}
    with pytest.raises(ValueError):
        fileio.write_json(tmp_path / "w.json", {"a": float("nan")})
    assert not (tmp_path / "w.json").exists()


def _fifo_reader(path):
    """A thread reading everything written to the FIFO ``path``; ``result[0]`` holds the bytes."""
    import threading

    result = []

    def read():
        with open(path, "rb") as fh:
            result.append(fh.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, result


def test_an_output_that_is_a_fifo_is_written_through_not_replaced(tmp_path):
    """Found by a new user's trial: ``-o /dev/null`` (as root) replaced the device with a regular file;
    a FIFO and ``/dev/stdout`` went the same way. Such outputs are written through now."""
    import os
    import stat

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    t, got = _fifo_reader(fifo)
    assert atomic_write(fifo, "hello\n") == fifo
    t.join(10)
    assert got == [b"hello\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    check_writable(fifo)        # no probe file made beside it, no error
    # in a transaction: after every regular output has landed
    t, got = _fifo_reader(fifo)
    with output_transaction():
        atomic_write(fifo, "a")
        atomic_write(tmp_path / "x.json", "b")
    t.join(10)
    assert got == [b"a"] and (tmp_path / "x.json").read_text() == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "x.json"]


def test_a_device_that_refuses_the_bytes_takes_the_transaction_back(tmp_path):
    """/dev/full refuses every write: the error names it, and the regular outputs staged with it are put
    back as they were (written through last, so only what can be undone came before)."""
    import os
    import stat

    full = tmp_path / "full"       # a node of /dev/full's device, so a regression cannot touch /dev itself
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        open(full, "rb").close()
    except OSError:
        pytest.skip("cannot make or open a device node here")
    (tmp_path / "x.json").write_text("old")
    with pytest.raises(OutputError, match="full: cannot write: No space left on device"):
        with output_transaction():
            atomic_write(tmp_path / "x.json", "new")
            atomic_write(tmp_path / "y.json", "new")
            atomic_write(full, "z")
    assert stat.S_ISCHR(os.stat(full).st_mode)
    assert (tmp_path / "x.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "x.json"]
    with pytest.raises(OutputError, match="full: cannot write"):
        atomic_write(full, "z")


def test_an_output_that_is_a_symlink_keeps_the_link(tmp_path):
    """The file a link points to gets the new content (renamed over, beside it); the link stays a link."""
    real = tmp_path / "d" / "target.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "l.json"
    link.symlink_to(real)
    check_writable(link)
    assert atomic_write(link, "new") == link
    assert link.is_symlink() and real.read_text() == "new"
    with output_transaction():
        atomic_write(link, "newer")
    assert link.is_symlink() and real.read_text() == "newer"
    assert sorted(p.name for p in real.parent.iterdir()) == ["target.json"]
    dangling = tmp_path / "dl.json"
    dangling.symlink_to(tmp_path / "d" / "made.json")
    atomic_write(dangling, "x")
    assert dangling.is_symlink() and (tmp_path / "d" / "made.json").read_text() == "x"


def test_a_fifo_is_opened_before_any_output_lands(tmp_path):
    """Found by a review: the commit renamed the regular outputs and then waited for the FIFO's reader, so
    a kill while it waited left them new. The FIFO is opened first now: until a reader comes, nothing has
    changed."""
    import os
    import threading
    import time

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    (tmp_path / "x.json").write_text("old")
    seen = []

    def late_reader():
        time.sleep(0.5)
        seen.append((tmp_path / "x.json").read_text())     # the writer waits in open() meanwhile
        seen.append(fifo.read_bytes())

    t = threading.Thread(target=late_reader, daemon=True)
    t.start()
    with output_transaction():
        atomic_write(tmp_path / "x.json", "new")
        atomic_write(fifo, "data")
    t.join(10)
    assert seen == ["old", b"data"] and (tmp_path / "x.json").read_text() == "new"


def test_a_loop_of_links_and_a_socket_are_output_errors(tmp_path):
    import os
    import socket

    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for call in (lambda: check_writable(tmp_path / "a"), lambda: atomic_write(tmp_path / "a", "x")):
        with pytest.raises(OutputError, match="a: cannot write: Too many levels of symbolic links"):
            call()
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(OutputError, match="s: cannot write: is a socket"):
            check_writable(tmp_path / "s")
    finally:
        sock.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "s"]
    assert not os.path.isfile(tmp_path / "s")


def _location(name: str) -> bytes:
    """An ONNX tensor's external-data entry naming ``name`` (key ``location``), as protobuf writes it."""
    v = name.encode()
    n, varint = len(v), b""
    while True:
        varint += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return b"\x0a\x08location\x12" + varint + v


def test_an_output_may_not_replace_a_file_an_input_consists_of(tmp_path):
    """The input itself, the files a model directory is made of (a SavedModel's graph and variables, training
    artifacts' models, checkpoint and their external data), and an ONNX model's external data (also in a
    subdirectory, under a name longer than 127 bytes, through a link, and beside a linked model, where onnx
    reads it) are refused; other files there (an earlier output: a rerun) and new files are not."""
    saved = tmp_path / "saved"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"pb")
    (saved / "variables" / "variables.index").write_bytes(b"ix")
    for out in (saved / "saved_model.pb", saved / "variables" / "variables.index", saved / "variables" / "new",
                saved):
        with pytest.raises(InputError, match="refusing to overwrite"):
            refuse_overwrite(out, saved)
    (saved / "placement.json").write_text("{}")
    refuse_overwrite(saved / "placement.json", saved)       # pardnn's own earlier output: a rerun may replace it
    refuse_overwrite(saved / "new.json", saved)
    long = "w/" + "x" * 140 + ".bin"
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07junk" + _location("m.onnx.data") + b"\x1a\x02xy" + _location(long)
                      + _location("a\x00b") + b"tail")
    assert onnx_external_locations(model) == sorted(["m.onnx.data", long])      # (a NUL is in no path)
    (tmp_path / "link.json").symlink_to(tmp_path / "m.onnx.data")
    for out in ("m.onnx.data", long, "link.json", "w/../m.onnx.data"):
        with pytest.raises(InputError, match="the external data of the input"):
            refuse_overwrite(tmp_path / out, model)
    refuse_overwrite(tmp_path / "m.placement.json", model)
    refuse_overwrite(tmp_path / "m.onnx.data", tmp_path / "other.onnx")      # not this input's data
    # a linked model reads its data beside the link, not beside the file it points to
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "m.onnx").symlink_to(model)
    with pytest.raises(InputError, match="m.onnx.data, the external data of the input"):
        refuse_overwrite(tmp_path / "elsewhere" / "m.onnx.data", tmp_path / "elsewhere" / "m.onnx")
    refuse_overwrite(tmp_path / "m.onnx.data", tmp_path / "elsewhere" / "m.onnx")
    # training artifacts: their models, checkpoint and the data those name
    art = tmp_path / "artifacts"
    art.mkdir()
    (art / "training_model.onnx").write_bytes(_location("training.data"))
    for name in ("training_model.onnx", "eval_model.onnx", "checkpoint", "training.data"):
        with pytest.raises(InputError, match="refusing to overwrite a file of the input"):
            refuse_overwrite(art / name, art)
    refuse_overwrite(art / "placement.json", art)
    assert onnx_external_locations(tmp_path / "missing.onnx") == []
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert onnx_external_locations(tmp_path / "empty.onnx") == []
