"""Tiny models: tokenizer, build/save/load, determinism, sampling, hub download arguments (bandpo.models.tiny)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch

from bandpo.core.provenance import weights_sha256
from bandpo.data.tiny_math import generate_tiny_math, write_tiny_math
from bandpo.models import cli as models_cli
from bandpo.models import hub
from bandpo.models import tiny as models
from bandpo.models.hub import download_model
from bandpo.models.sizes import SIZES, get_size
from bandpo.models.tiny import (
    CHARSET,
    build_model,
    build_tokenizer,
    init_model,
    lr_lambda,
    pretrain,
    sample_accuracy,
    sample_completions,
)

TEXT = "Q: Solve for x: 3x-40=x-34.\nA: 2x=-34+40=6, x=6/2=3. \\boxed{3}"


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tm")
    write_tiny_math(d, seed=0, n_train=240, n_val=15, n_test=15)
    return d


@pytest.fixture(scope="module")
def built(data_dir, tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("models") / "tiny-test"
    info = build_model("tiny-test", data_dir, out, seed=0, threads=1, progress=False)
    return out, info


# ------------------------------------------------------------------------------------------------------------
# tokenizer
# ------------------------------------------------------------------------------------------------------------
def test_tokenizer_roundtrip_and_specials(tmp_path):
    from transformers import AutoTokenizer

    tok = build_tokenizer()
    assert len(tok) == 3 + len(CHARSET)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(TEXT)  # one token per character
    assert tok.decode(ids) == TEXT
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok.bos_token_id is None and not getattr(tok, "chat_template", None)

    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(TEXT)["input_ids"] == ids  # no BOS/EOS added
    assert again.decode(ids + [again.eos_token_id, again.pad_token_id], skip_special_tokens=True) == TEXT
    assert again.padding_side == "left" and again.model_max_length == 256
    assert again.decode(again("  two  spaces ")["input_ids"]) == "  two  spaces "


def test_tokenizer_unknown_characters_do_not_crash():
    tok = build_tokenizer()
    ids = tok("x\t=\u00e9\u4e2d1", add_special_tokens=False)["input_ids"]
    assert ids.count(tok.unk_token_id) == 3 and len(ids) == 6


def test_tokenizer_left_padding():
    tok = build_tokenizer()
    enc = tok(["ab", "abcd"], padding=True, return_tensors="pt")
    assert enc["input_ids"][0].tolist()[:2] == [tok.pad_token_id] * 2
    assert enc["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]


# ------------------------------------------------------------------------------------------------------------
# sizes, schedule
# ------------------------------------------------------------------------------------------------------------
def test_registered_sizes_param_counts():
    tok = build_tokenizer()
    small = models.count_parameters(init_model(SIZES["tiny-s"], tok))
    medium = models.count_parameters(init_model(SIZES["tiny-m"], tok))
    assert 150_000 < small < 300_000
    assert 2 * small < medium < 1_200_000
    with pytest.raises(ValueError):
        get_size("tiny-xl")
    assert get_size("tiny-s", steps=7, lr=None).steps == 7


def test_lr_schedule_warmup_constant_decay():
    spec = get_size("tiny-s", steps=1000, warmup_steps=100, decay_frac=0.3, min_lr_frac=0.1)
    f = lr_lambda(spec)
    assert f(0) == pytest.approx(0.01) and f(99) == pytest.approx(1.0)
    assert f(500) == 1.0 and f(700) == 1.0
    assert f(850) == pytest.approx(0.55)
    assert f(1000) == pytest.approx(0.1)


def test_batches_cover_each_epoch():
    import random

    it = models._batches(100, 8, torch.Generator().manual_seed(0), random.Random(0), 0.5)
    seen = [i for _ in range(12) for i, _ in next(it)]  # 12 full batches per epoch (100 // 8)
    assert len(seen) == 96 and len(set(seen)) == 96


def test_packing_isolates_examples():
    """A packed batch gives the same per-example logits and loss as a padded one."""
    tok = build_tokenizer()
    model = init_model(get_size("tiny-test"), tok, seed=0)
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 90, (int(n),), generator=gen).tolist() for n in (9, 5, 14, 3, 7)]
    labels = [[-100] * 2 + s[2:] for s in seqs]
    ids, pos, lab = models.pack_sequences(seqs, labels, capacity=16, pad_id=tok.pad_token_id)
    assert ids.shape[1] == 16 and ids.shape[0] < len(seqs)
    assert int((lab != -100).sum()) == sum(len(s) - 2 for s in seqs)
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, labels=lab, use_cache=False)
        width = max(map(len, seqs))
        padded_ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
        padded_lab = torch.tensor([x + [-100] * (width - len(x)) for x in labels])
        padded = model(input_ids=padded_ids, labels=padded_lab, use_cache=False)
    assert packed.loss.item() == pytest.approx(padded.loss.item(), abs=1e-5)
    by_len = {len(x): k for k, x in enumerate(seqs)}  # lengths are distinct: a segment's length names it
    found = 0
    for r in range(ids.shape[0]):
        starts = [c for c in range(ids.shape[1]) if pos[r, c] == 0] + [ids.shape[1]]
        for c, nxt in zip(starts[:-1], starts[1:], strict=True):
            n = next(
                n
                for n in sorted(by_len, reverse=True)
                if n <= nxt - c and ids[r, c : c + n].tolist() == seqs[by_len[n]]
            )
            torch.testing.assert_close(packed.logits[r, c : c + n], padded.logits[by_len[n], :n], atol=1e-5, rtol=1e-4)
            found += 1
    assert found == len(seqs)


def test_packed_and_padded_pretraining_agree():
    tok = build_tokenizer()
    rows = generate_tiny_math(seed=0, n_train=64, n_val=1, n_test=1)["train"]
    spec = get_size("tiny-test", steps=3)
    packed, padded = init_model(spec, tok, seed=0), init_model(spec, tok, seed=0)
    assert models.packing_isolates(packed)
    out = pretrain(packed, tok, rows, spec, seed=0, progress=False)
    pretrain(padded, tok, rows, get_size("tiny-test", steps=3, pack_len=0), seed=0, progress=False)
    assert out["packed"] is True
    for (name, p), q in zip(packed.named_parameters(), padded.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=name)


def test_label_smoothing_is_the_smoothed_cross_entropy():
    """The smoothed path (any label_smoothing > 0) with a vanishing smoothing equals HF's own loss (same shift,
    same answer-token mask); a real smoothing changes it."""
    tok = build_tokenizer()
    rows = generate_tiny_math(seed=0, n_train=64, n_val=1, n_test=1)["train"]
    losses = {}
    for ls in (0.0, 1e-12, 0.1):
        model = init_model(get_size("tiny-test"), tok, seed=0)
        out = pretrain(model, tok, rows, get_size("tiny-test", steps=1, label_smoothing=ls), seed=0, progress=False,
                       log_every=1)  # fmt: skip
        losses[ls] = out["history"][0]["loss"]
    assert losses[1e-12] == pytest.approx(losses[0.0], abs=2e-4)
    assert losses[0.1] != pytest.approx(losses[0.0], abs=2e-4)
    assert get_size("tiny-s").label_smoothing == 0.03 and get_size("tiny-m").label_smoothing == 0.03


# ------------------------------------------------------------------------------------------------------------
# build, save, load, generate
# ------------------------------------------------------------------------------------------------------------
def test_build_saves_hf_layout_and_info(built):
    out, info = built
    names = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
            "info.json"} <= names  # fmt: skip
    assert not [p for p in os.listdir(out.parent) if p.startswith(".")]  # no temp dirs left
    saved = json.loads((out / "info.json").read_text())
    assert saved["params"] == info["params"] > 0
    assert saved["seed"] == 0 and saved["size"] == "tiny-test"
    assert saved["build_seconds"] > 0 and 0.0 <= saved["base_accuracy_validation"] <= 1.0
    assert set(saved["validation"]["per_level"]) == {"1", "2", "3"}
    # what decides the numerics and which weights came out: machine facts and the weights' checksum
    assert {"cpu_model", "torch_cpu_capability", "torch_threads"} <= set(saved["machine"])
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    assert saved["weights_sha256"] == {"model.safetensors": digest} == weights_sha256(out)
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(out).st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700
    assert os.stat(out / "model.safetensors").st_mode & 0o777 == 0o666 & ~umask
    gen_cfg = json.loads((out / "generation_config.json").read_text())
    assert gen_cfg["top_k"] == 0 and gen_cfg["temperature"] == 1.0 and gen_cfg["do_sample"] is True


def test_from_pretrained_and_generate(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, info = built
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert models.count_parameters(model) == info["params"]
    enc = tok(["Q: Compute 1+2.\nA: ", "Q: What is 17 mod 5?\nA: "], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    seq = model.generate(**enc, max_new_tokens=8, do_sample=True, top_k=0, pad_token_id=tok.pad_token_id)
    assert seq.shape[0] == 2 and seq.shape[1] <= enc["input_ids"].shape[1] + 8
    # the saved generation config already samples at T=1.0 without top-k
    torch.manual_seed(0)
    seq2 = model.generate(**enc, max_new_tokens=8)
    assert torch.equal(seq, seq2)


def test_build_is_deterministic(built, data_dir, tmp_path):
    from safetensors.torch import load_file

    out, info = built
    info2 = build_model("tiny-test", data_dir, tmp_path / "again", seed=0, threads=1, progress=False)
    a, b = load_file(out / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert info2["validation"]["accuracy"] == info["validation"]["accuracy"]
    assert info2["loss_history"] == info["loss_history"]
    assert info2["weights_sha256"] == info["weights_sha256"]  # equal bits, equal checksum
    other = build_model("tiny-test", data_dir, tmp_path / "seed1", seed=1, threads=1, progress=False)
    assert other["weights_sha256"] != info["weights_sha256"]  # another pretraining seed, another base model


def test_different_seed_differs(data_dir):
    tok = build_tokenizer()
    rows = generate_tiny_math(seed=0, n_train=64, n_val=1, n_test=1)["train"]
    spec = get_size("tiny-test", steps=3)
    m0, m1 = init_model(spec, tok, seed=0), init_model(spec, tok, seed=1)
    pretrain(m0, tok, rows, spec, seed=0, progress=False)
    pretrain(m1, tok, rows, spec, seed=1, progress=False)
    assert not torch.equal(m0.model.embed_tokens.weight, m1.model.embed_tokens.weight)


def test_rebuild_replaces_old_directory(data_dir, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    build_model("tiny-test", data_dir, out, seed=0, threads=1, progress=False, steps=2, eval_limit=3)
    assert not (out / "stale.txt").exists() and (out / "info.json").exists()
    assert sorted(os.listdir(tmp_path)) == ["m"]


def test_failed_build_leaves_nothing(data_dir, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "write_json", boom)  # bandpo.models.tiny writes info.json with it
    with pytest.raises(RuntimeError):
        build_model("tiny-test", data_dir, tmp_path / "m", seed=0, threads=1, progress=False, steps=2, eval_limit=3)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------------------
# sampling and accuracy
# ------------------------------------------------------------------------------------------------------------
def test_sample_completions_deterministic_and_entropy(built):
    out, _ = built
    model, tok = models.load_model(out)
    prompts = ["Q: Compute 12+30.\nA: ", "Q: Solve for x: x+5=9.\nA: "]
    a, sa = sample_completions(model, tok, prompts, k=3, seed=5, max_new_tokens=10)
    b, sb = sample_completions(model, tok, prompts, k=3, seed=5, max_new_tokens=10)
    assert a == b and sa == sb
    assert len(a) == 2 and all(len(c) == 3 for c in a)
    assert 0.0 < sa["token_entropy"] <= torch.log(torch.tensor(float(len(tok)))).item() + 1e-4


def test_sample_accuracy_with_oracle_grader(built):
    out, _ = built
    rows = generate_tiny_math(seed=0, n_train=0, n_val=0, n_test=15)["test"]
    res = sample_accuracy(str(out), None, rows, k=2, max_new_tokens=6, grader=lambda resp, ref: 1.0)
    assert res["accuracy"] == 1.0 and res["n_samples"] == 30
    assert set(res["per_level"]) == {"1", "2", "3"} and len(res["per_kind"]) == 5
    res = sample_accuracy(str(out), None, rows, k=2, max_new_tokens=6, grader=lambda resp, ref: 0.0)
    assert res["accuracy"] == 0.0


# ------------------------------------------------------------------------------------------------------------
# hub download (GPU profile): argument handling only, no network
# ------------------------------------------------------------------------------------------------------------
def _fake_snapshot(calls, files=("config.json", "model.safetensors")):
    def fake(**kwargs):
        calls.append(kwargs)
        d = kwargs["local_dir"]
        os.makedirs(os.path.join(d, ".cache", "huggingface"), exist_ok=True)
        for f in files:
            with open(os.path.join(d, f), "w") as fh:
                fh.write("{}")
        return d

    return fake


def test_download_model_arguments(tmp_path):
    calls = []
    out = download_model("Qwen/Qwen2.5-3B-Instruct", tmp_path / "qwen", revision="abc123",
                         snapshot_download=_fake_snapshot(calls))  # fmt: skip
    (kw,) = calls
    assert kw["repo_id"] == "Qwen/Qwen2.5-3B-Instruct" and kw["revision"] == "abc123" and kw["repo_type"] == "model"
    assert kw["allow_patterns"] == list(hub.DEFAULT_ALLOW_PATTERNS)
    assert os.path.dirname(kw["local_dir"]) == str(tmp_path)  # temp dir beside the target, renamed at the end
    assert sorted(os.listdir(out)) == ["config.json", "info.json", "model.safetensors"]
    saved = json.loads((out / "info.json").read_text())
    assert saved["repo_id"] == "Qwen/Qwen2.5-3B-Instruct"
    assert saved["weights_sha256"] == {"model.safetensors": hashlib.sha256(b"{}").hexdigest()}
    assert sorted(os.listdir(tmp_path)) == ["qwen"]

    calls.clear()
    download_model("a/b", tmp_path / "b", allow_patterns=None, snapshot_download=_fake_snapshot(calls))
    assert "allow_patterns" not in calls[0] and "revision" not in calls[0]


@pytest.mark.parametrize("bad", ["", "noslash", "a/b/c", "/x", "x/"])
def test_download_model_rejects_bad_repo_id(tmp_path, bad):
    with pytest.raises(ValueError):
        download_model(bad, tmp_path / "m", snapshot_download=_fake_snapshot([]))


def test_download_model_failure_leaves_nothing(tmp_path):
    calls = []
    with pytest.raises(FileNotFoundError):  # snapshot without config.json
        download_model("a/b", tmp_path / "m", snapshot_download=_fake_snapshot(calls, files=("x.txt",)))
    assert os.listdir(tmp_path) == []


def test_download_cli_uses_huggingface_hub(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _fake_snapshot(calls))
    rc = models_cli.main(["download", "--repo-id", "o/n", "--out", str(tmp_path / "m"), "--revision", "r1",
                      "--allow-patterns", "*.json"])  # fmt: skip
    assert rc == 0 and calls[0]["revision"] == "r1" and calls[0]["allow_patterns"] == ["*.json"]


# ------------------------------------------------------------------------------------------------------------
# full build (slow): the embedded profile's real models
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("size", ["tiny-s", "tiny-m"])
def test_full_build_is_partly_right(tmp_path, size):
    """The embedded profile's real build (minutes per size): partly right at T=1.0 on held-out problems."""
    data = tmp_path / "data"
    write_tiny_math(data, seed=0)
    info = build_model(size, data, tmp_path / size, seed=0, threads=1, progress=False)
    assert 0.2 <= info["base_accuracy_validation"] <= 0.6
    assert info["build_cpu_seconds"] < 540
