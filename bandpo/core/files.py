"""Reading JSON objects and JSONL, atomic writes (a reader sees the old file or folder or the whole new one, never
a partial one), and the data files shipped inside the package (`package_data`)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar


def package_data(*parts: str) -> Path:
    """A data file or folder shipped inside the bandpo package (declared in pyproject.toml's package-data), e.g.
    ``package_data("schemas", "run.schema.yaml")``, ``package_data("score", "lm_eval_tasks")``. A file-system path: the
    package is installed as files (editable, or from its wheel), and lm-eval is given the task folder by path."""
    return Path(str(resources.files("bandpo").joinpath(*parts)))


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


_AT_FDCWD = -100  # <fcntl.h>: paths relative to the working directory
_RENAME_EXCHANGE = 2  # <linux/fs.h>: swap the two paths in one step


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically (Linux ``renameat2(..., RENAME_EXCHANGE)``, glibc >= 2.28). False where
    that is not available: another OS, an older C library, or a file system that refuses the flag."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"renameat2(RENAME_EXCHANGE) {a} <-> {b}: {os.strerror(err)}")


def replace_dir(tmp: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Put the finished folder ``tmp`` in place of ``final`` (same file system) and delete the old ``final``.

    On Linux the two are swapped in one atomic step (``renameat2`` with ``RENAME_EXCHANGE``; ext4, xfs, btrfs,
    tmpfs and overlayfs support it), so ``final`` is at every moment either the old folder or the whole new one.
    Where that is not available (another OS, or a file system that refuses the flag) the old folder is renamed aside
    and ``tmp`` renamed onto ``final``: between those two renames ``final`` does not exist for a moment, so a reader
    may find no folder, but never a partial one."""
    tmp, final = Path(tmp), Path(final)
    if not final.exists():
        os.replace(tmp, final)
        return final
    if _exchange(tmp, final):
        old = tmp  # after the swap the old folder is at tmp's path
    else:
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)
    return final


def read_json_object(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` (a job's spec file, a setting chosen by an earlier job); ValueError naming
    ``what`` (the flag that gave it: "--spec") and the file when it is missing, not JSON or not an object."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {path}: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{what} {path}: expected a JSON object of field values, got {type(values).__name__}")
    return values


Spec = TypeVar("Spec")


def read_spec(
    path: str | os.PathLike, parse: Callable[[dict[str, Any]], Spec], set_files: Sequence[str | os.PathLike] = ()
) -> Spec:
    """The job a spec file describes: the one reader of the run plan's spec files (`bandpo.plan.runs`: a training
    run's, a verl run's, a scoring job's, a look's). The JSON object at ``path``, the settings of each ``set_files``
    object applied over it (a setting an earlier job chose: the workflow's select rule), then ``parse`` (the job
    type's checked constructor, which validates every field once: the job trusts the value after); ValueError naming
    the file and the field."""
    values = read_json_object(path, "--spec")
    for set_file in set_files:
        values.update(read_json_object(set_file, "--set-file"))
    try:
        return parse(values)
    except (TypeError, ValueError) as e:
        raise ValueError(f"--spec {path}: {e}") from None


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The JSON objects of a JSONL file, one a line, blank lines skipped; ValueError naming ``file:line`` for a line
    that is not a JSON object."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def new_tmp_dir(out_dir: str | os.PathLike) -> Path:
    """An empty temporary folder beside ``out_dir`` (same file system, so that `publish_dir` can rename it)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))


def publish_dir(tmp_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Put the finished folder ``tmp_dir`` in place of ``out_dir`` (`replace_dir`), first giving it and everything
    in it the umask's modes (mkdtemp makes 0700 folders, and some writers, save_pretrained among them, 0600 files)."""
    umask = os.umask(0)
    os.umask(umask)
    tmp_dir = Path(tmp_dir)
    os.chmod(tmp_dir, 0o777 & ~umask)
    for p in tmp_dir.rglob("*"):
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)
    return replace_dir(tmp_dir, out_dir)


def write_csv(frame: Any, path: str | os.PathLike) -> Path:
    """A pandas frame as CSV, atomically, in the format of every published table: no index, numbers to 6
    significant digits, ``\\n`` line ends (what the pages and docs round from: `bandpo.report.text.rounded`)."""
    return atomic_write_text(path, frame.to_csv(index=False, float_format="%.6g", lineterminator="\n"))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """``obj`` as indented JSON, atomically (`atomic_write_text`)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
