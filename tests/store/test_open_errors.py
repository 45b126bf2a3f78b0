"""A store that cannot be opened says why, naming the path (issue 14, item 13).

SQLite itself only says ``unable to open database file``. Tests run as root here, where
``chmod`` does not stop writes, so unwritable directories and read-only file systems
are shown to the message builder (`open_problem`) through a patched ``os.access`` /
``os.statvfs``; paths that cannot exist (a file where a directory is expected, a
directory where the file is expected) are opened for real.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from planexec.cli import main
from planexec.errors import StoreError
from planexec.store.sqlite import SQLiteRunStore, open_problem


def test_a_file_where_the_directory_should_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("not a directory")
    with pytest.raises(StoreError) as err:
        SQLiteRunStore(tmp_path / "runs" / "store" / "runs.db")
    message = str(err.value)
    assert f"cannot open the run store {tmp_path / 'runs' / 'store' / 'runs.db'}" in message
    assert f"{tmp_path / 'runs'} is a file, not a directory" in message


def test_a_file_as_the_parent_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("not a directory")
    with pytest.raises(StoreError, match=r"runs is not a directory"):
        SQLiteRunStore(tmp_path / "runs" / "runs.db")


def test_a_directory_where_the_file_should_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "runs.db").mkdir()
    with pytest.raises(StoreError) as err:
        SQLiteRunStore(tmp_path / "runs.db")
    assert f"{tmp_path / 'runs.db'} is a directory, not a file" in str(err.value)
    assert "unable to open database file" in str(err.value)  # SQLite's words are kept


def test_runs_list_says_why_the_store_cannot_be_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ro").write_text("a file")
    store = tmp_path / "ro" / "runs.db"
    assert main(["runs", "list", "--store", str(store)]) != 0
    err = capsys.readouterr().err
    assert str(store) in err and "is not a directory" in err


@pytest.fixture
def unwritable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """``tmp_path/locked`` reads as not writable (as on a read-only mount, even for root)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access

    def access(path: Any, mode: int, **kw: Any) -> bool:
        if mode & os.W_OK and Path(path).resolve().is_relative_to(locked.resolve()):
            return False
        return real_access(path, mode, **kw)

    monkeypatch.setattr(os, "access", access)
    return locked


def test_an_unwritable_directory_is_named(unwritable: Path) -> None:
    why = open_problem(unwritable / "runs.db")
    assert why == (
        f"the directory {unwritable} is not writable (permission denied), so the file "
        "runs.db cannot be created"
    )


def test_an_existing_file_in_an_unwritable_directory_needs_its_wal_files(
    unwritable: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(os, "access", lambda *a, **k: True)
        (unwritable / "runs.db").write_bytes(b"")
    why = open_problem(unwritable / "runs.db")
    assert why is not None and f"the directory {unwritable} is not writable" in why
    assert "runs.db-wal" in why


def test_a_missing_directory_that_cannot_be_created_is_named(unwritable: Path) -> None:
    why = open_problem(unwritable / "a" / "b" / "runs.db")
    assert why == (
        f"the directory {unwritable / 'a' / 'b'} does not exist and cannot be created: "
        f"the directory {unwritable} is not writable (permission denied)"
    )


def test_a_read_only_file_system_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly())
    why = open_problem(tmp_path / "runs.db")
    assert why is not None
    assert f"the directory {tmp_path} is on a read-only file system" in why


def test_an_unwritable_store_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "runs.db"
    store.write_bytes(b"")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: Path(p) != store and real_access(p, mode, **kw)
    )
    assert open_problem(store) == (
        f"the file {store} is not readable and writable (permission denied)"
    )


def test_a_store_that_can_be_opened_has_no_problem(tmp_path: Path) -> None:
    assert open_problem(tmp_path / "new" / "runs.db") == (
        f"the directory {tmp_path / 'new'} does not exist"
    )
    assert open_problem(tmp_path / "runs.db") is None
    with SQLiteRunStore(tmp_path / "runs.db"):
        pass
    assert open_problem(tmp_path / "runs.db") is None


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root writes through chmod 0500; the read-only case is covered by the patched tests",
)
def test_a_read_only_directory_for_real(tmp_path: Path) -> None:  # pragma: no cover - non-root
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="is not writable"):
            SQLiteRunStore(locked / "runs.db")
    finally:
        locked.chmod(0o700)
