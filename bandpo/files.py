"""Atomic file writes: a reader sees the old file or the whole new one, never a partial one."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _replacing(path: Path) -> Iterator[tuple[int, str]]:
    """A temporary file beside ``path`` (same file system) for the body to fill, through the open descriptor or the
    name; when the body returns it is made 0644 (mkstemp creates 0600) and renamed onto ``path``, when it raises
    it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        yield fd, tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path`` (same file system), fsync, then rename onto ``path``."""
    path = Path(path)
    with _replacing(path) as (fd, _), os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """`atomic_write_bytes` of ``text`` in UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_move(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Move a finished file onto ``dst``: moved beside ``dst`` under a temporary name first (a copy when it is on
    another file system), then renamed, so ``dst`` never exists half-written."""
    dst = Path(dst)
    with _replacing(dst) as (fd, tmp):
        os.close(fd)
        shutil.move(os.fspath(src), tmp)
    return dst


def replace_dir(tmp: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Put the finished folder ``tmp`` in place of ``final`` (same file system): two renames, an old ``final``
    moved aside first and then removed, so ``final`` is at every moment either the old folder or the new one."""
    tmp, final = Path(tmp), Path(final)
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final
