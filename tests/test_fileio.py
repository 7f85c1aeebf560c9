"""Atomic outputs: one file, and several that commit together or not at all."""

from __future__ import annotations

import pytest

from pardnn.errors import InputError, OutputError
from pardnn.fileio import atomic_write, check_writable, output_transaction, read_json


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
