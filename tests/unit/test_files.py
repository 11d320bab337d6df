"""bandpo.core.files: atomic file writes, moves and folder swaps leave either the old or the whole new content."""

from __future__ import annotations

import os
import stat

import pytest

from bandpo.core import files


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_atomic_write_replaces_whole_file_and_cleans_up(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    files.atomic_write_text(path, "old")
    files.atomic_write_text(path, "new é")
    assert path.read_text(encoding="utf-8") == "new é"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert _leftovers(path.parent) == []


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    files.atomic_write_text(path, "old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        files.atomic_write_text(path, "new")
    assert path.read_text() == "old" and _leftovers(tmp_path) == []


def test_atomic_move(tmp_path):
    src = tmp_path / "a.bin"
    src.write_bytes(b"x" * 10)
    dst = files.atomic_move(src, tmp_path / "d" / "b.bin")
    assert dst.read_bytes() == b"x" * 10 and not src.exists() and _leftovers(dst.parent) == []


def test_replace_dir_swaps_folders(tmp_path):
    final = tmp_path / "model"
    first = tmp_path / ".tmp1"
    first.mkdir()
    (first / "w.bin").write_text("1")
    files.replace_dir(first, final)  # no old folder
    assert (final / "w.bin").read_text() == "1" and not first.exists()
    second = tmp_path / ".tmp2"
    second.mkdir()
    (second / "v.bin").write_text("2")
    files.replace_dir(second, final)  # replaces the old folder whole: nothing of it survives
    assert sorted(os.listdir(final)) == ["v.bin"] and _leftovers(tmp_path) == []


def _old_and_new_folder(tmp_path):
    """``model/`` holding ``old.bin`` and a finished ``.new/`` holding ``new.bin`` beside it."""
    final, new = tmp_path / "model", tmp_path / ".new"
    for folder, name in ((final, "old.bin"), (new, "new.bin")):
        folder.mkdir()
        (folder / name).write_text(name)
    return final, new


def test_replace_dir_never_leaves_final_missing_on_linux(tmp_path, monkeypatch):
    """Where the kernel swaps the two folders in one step, no rename ever moves the old folder aside."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    if not files._exchange(a, b):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here: replace_dir takes the documented two-rename path")
    final, new = _old_and_new_folder(tmp_path)
    moved = []
    real_replace = os.replace
    monkeypatch.setattr(files.os, "replace", lambda s, d: (moved.append((s, d)), real_replace(s, d)))
    files.replace_dir(new, final)
    assert moved == [] and sorted(os.listdir(final)) == ["new.bin"] and not new.exists()


def test_replace_dir_fallback_without_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    final, new = _old_and_new_folder(tmp_path)
    files.replace_dir(new, final)
    assert sorted(os.listdir(final)) == ["new.bin"] and _leftovers(tmp_path) == []


def test_read_jsonl_names_the_bad_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert files.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: not valid JSON"):
        files.read_jsonl(path)
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: expected a JSON object, got list"):
        files.read_jsonl(path)


def test_one_spec_reader_for_every_job(tmp_path):
    """`files.read_spec`, the one reader of the run plan's spec files: a set file's settings go over the spec, the
    job type's parser validates, and every failure is a ValueError naming the file (and the parser's field)."""
    from bandpo.decide.looks import look_spec
    from bandpo.score.spec import EvalJob
    from bandpo.train.settings import from_dict
    from bandpo.verl.spec import VerlRun

    spec, chosen = tmp_path / "spec.json", tmp_path / "chosen.json"
    spec.write_text('{"model": "m", "data": "d.jsonl", "out": "o", "updates_per_step": 2}')
    chosen.write_text('{"updates_per_step": 4}')
    assert files.read_spec(spec, from_dict).updates_per_step == 2
    assert files.read_spec(spec, from_dict, [chosen]).updates_per_step == 4
    chosen.write_text('{"updates_per_step": 0}')
    with pytest.raises(ValueError, match=rf"(?s)--spec {spec}: .*updates_per_step"):
        files.read_spec(spec, from_dict, [chosen])
    bad = tmp_path / "bad.json"
    for text, parse, match in (
        ("[1]", from_dict, "expected a JSON object"),
        ("{not json", VerlRun.from_mapping, "Expecting property name"),
        ('{"bogus": 1}', EvalJob.from_dict, "unknown scoring job field"),
        ('{"design": {}}', look_spec, r"not a look's spec \(missing task, metric, seeds, summaries\)"),
        ('{"modle": "m"}', VerlRun.from_mapping, "modle"),
    ):
        bad.write_text(text)
        with pytest.raises(ValueError, match=rf"(?s)--spec {bad}: .*{match}"):
            files.read_spec(bad, parse)
    with pytest.raises(ValueError, match="--spec .*nope.json"):
        files.read_spec(tmp_path / "nope.json", from_dict)
