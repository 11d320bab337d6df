"""The mechanism probe: the tiny-math variant with decoys (bandpo.data.tiny_math), and the deciding-token measurement
(bandpo.train.probe)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from bandpo.core.files import read_jsonl
from bandpo.data import tiny_math as T
from bandpo.data.cli import main as tasks_main
from bandpo.data.tiny_math import boxed, generate_tiny_math
from bandpo.grader import grade
from bandpo.models.tiny import build_model, build_tokenizer, load_model
from bandpo.train import probe as P

SMALL = {"n_train": 4000, "n_val": 45, "n_test": 60}
SPEC = T.ProbeSpec(kinds=("arith",), levels=(2,), decoy_share=0.8, n_test=12, n_val=6)


@pytest.fixture(scope="module")
def probe_splits():
    return T.apply_probe(generate_tiny_math(seed=3, **SMALL), SPEC, seed=3)


# ------------------------------------------------------------------------------------------------------------
# the data variant
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad, match",
    [
        ({"kinds": ["mod"]}, "probe.kinds"),
        ({"kinds": ["nope"]}, "probe.kinds"),
        ({"levels": [4]}, "probe.levels"),
        ({"last_digit": 9}, "last_digit"),
        ({"decoy_share": 1.5}, "decoy_share"),
        ({"n_test": -1}, "n_test"),
        ({"decoy": 0.9}, "unknown keys"),
    ],
)
def test_spec_rejects_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        T.ProbeSpec.from_dict(bad)


def test_spec_roundtrip():
    spec = T.ProbeSpec.from_dict({"kinds": "word", "levels": [1], "decoy_share": 0.9})
    assert spec.kinds == ("word",) and spec.levels == (1,)
    assert T.ProbeSpec.from_dict(spec.to_dict()) == spec


def test_rule_and_decoy():
    row = {"kind": "arith", "level": 2, "answer": "47"}
    assert T.in_subset(row, SPEC)
    assert not T.in_subset({**row, "answer": "46"}, SPEC)
    assert not T.in_subset({**row, "level": 3}, SPEC)
    assert not T.in_subset({**row, "kind": "word"}, SPEC)
    assert not T.in_subset({**row, "answer": "-7"}, SPEC)
    assert T.decoy_answer("47") == "48" and T.decoy_answer("7") == "8"
    assert T.decoy_solution("40+7=47. \\boxed{47}", "47", "48") == "40+7=48. \\boxed{48}"
    with pytest.raises(ValueError, match="does not end in"):
        T.decoy_solution("47=4*10+7. \\boxed{7}", "7", "8")


def test_probe_splits_shape_and_membership(probe_splits):
    s = probe_splits
    assert len(s["train"]) == SMALL["n_train"]
    for split, want in (("test", SPEC.n_test), ("validation", SPEC.n_val)):
        probes = [r for r in s[split] if r["subset"] == "probe"]
        assert len(probes) >= want
        assert len({r["id"] for r in s[split]}) == len(s[split])
    for split, rows in s.items():
        for r in rows:
            assert r["subset"] == ("probe" if T.in_subset(r, SPEC) else "rest")
            assert (r["decoy"] is not None) == (r["subset"] == "probe")
            if split != "train":  # evaluation rows show the true answer
                assert r["shown_answer"] == r["answer"] and grade(r["solution"], r["answer"]) == 1.0
    problems = {split: {r["problem"] for r in rows} for split, rows in s.items()}
    assert not problems["train"] & problems["test"]
    assert not problems["train"] & problems["validation"]
    assert not problems["test"] & problems["validation"]


def test_train_decoys(probe_splits):
    train = probe_splits["train"]
    probes = [r for r in train if r["subset"] == "probe"]
    assert len(probes) >= 20
    decoyed = [r for r in probes if r["shown_answer"] != r["answer"]]
    share = len(decoyed) / len(probes)
    assert abs(share - SPEC.decoy_share) < 4 * math.sqrt(0.8 * 0.2 / len(probes))
    for r in decoyed:  # the worked line and boxed answer show the decoy; the reference answer stays true
        assert r["shown_answer"] == r["decoy"] == str(int(r["answer"]) + 1)
        assert r["solution"].endswith("=" + r["decoy"] + ". " + boxed(r["decoy"]))
        assert grade(r["solution"], r["answer"]) == 0.0
    for r in train:
        if r["shown_answer"] == r["answer"]:
            assert r["solution"].endswith(boxed(r["answer"]))


def test_rest_of_train_is_unchanged(probe_splits):
    """Train rows outside the subset are the plain generator's rows, except redraws of added held-out problems."""
    plain = generate_tiny_math(seed=3, **SMALL)
    added = {r["problem"] for split in ("test", "validation") for r in probe_splits[split]} - {
        r["problem"] for split in ("test", "validation") for r in plain[split]
    }
    fields = ("problem", "answer", "solution", "level", "kind")
    kept = [i for i, r in enumerate(plain["train"]) if r["problem"] not in added]
    assert len(kept) < len(plain["train"])  # some train rows repeated an added probe problem
    for i in kept:
        row = probe_splits["train"][i]
        if row["subset"] == "rest":
            assert all(row[f] == plain["train"][i][f] for f in fields)


def test_probe_is_deterministic_and_seeded():
    a = T.apply_probe(generate_tiny_math(seed=3, **SMALL), SPEC, seed=3)
    b = T.apply_probe(generate_tiny_math(seed=3, **SMALL), SPEC, seed=3)
    c = T.apply_probe(generate_tiny_math(seed=4, **SMALL), SPEC, seed=4)
    assert a == b
    assert a["test"] != c["test"]


def test_subset_cells_without_train_rows_are_refused():
    # arith level 1 has ~10 problems whose result ends in 7: holding out 10 leaves none to train on
    with pytest.raises(ValueError, match=r"no train row of the subset in cells \[\('arith', 1\)\]"):
        spec = T.ProbeSpec(kinds=("arith",), levels=(1,), n_test=7, n_val=3)
        T.apply_probe(generate_tiny_math(seed=3, **SMALL), spec, seed=3)


def test_zero_share_shows_only_true_answers():
    s = T.apply_probe(generate_tiny_math(seed=3, **SMALL), T.ProbeSpec(decoy_share=0.0, n_test=5, n_val=0), seed=3)
    assert all(r["shown_answer"] == r["answer"] for r in s["train"])


def test_cli_writes_probe_fields(tmp_path):
    spec = {"decoy_share": 0.9, "n_test": 10, "n_val": 5}
    tasks_main(["tiny-math", "--out", str(tmp_path), "--seed", "1", "--n-train", "2000", "--n-val", "30",
                "--n-test", "30", "--probe", json.dumps(spec)])  # fmt: skip
    test = read_jsonl(tmp_path / "test.jsonl")
    assert sum(r["subset"] == "probe" for r in test) >= 10
    assert {"subset", "decoy", "shown_answer"} <= set(test[0])
    with pytest.raises(ValueError, match="unknown keys"):
        tasks_main(["tiny-math", "--out", str(tmp_path / "x"), "--n-train", "100", "--probe", '{"share": 1}'])


def test_subset_rows_needs_probe_rows():
    with pytest.raises(ValueError, match="without a probe 'subset'"):
        T.subset_rows([{"id": "a", "prompt": "Q"}], "probe")
    with pytest.raises(ValueError, match="subset must be"):
        T.subset_rows([], "other")


# ------------------------------------------------------------------------------------------------------------
# the deciding token, on a scripted LM whose answer distribution is known exactly
# ------------------------------------------------------------------------------------------------------------
class ScriptedLM(torch.nn.Module):
    """A causal LM over the char tokenizer whose continuation of a prompt is a fixed mixture of strings: the next
    token's probability is the weight of the strings that extend the current prefix with it (EOS after a full
    string), with a 1e-6 floor on every token."""

    def __init__(self, tokenizer, mixtures: dict[str, list[tuple[str, float]]]):
        super().__init__()
        self.tok = tokenizer
        self.mixtures = mixtures
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        vocab = len(self.tok)
        out = torch.full((*input_ids.shape, vocab), 1e-6)
        for b in range(input_ids.shape[0]):
            n = int(attention_mask[b].sum()) if attention_mask is not None else input_ids.shape[1]
            text = self.tok.decode(input_ids[b, :n].tolist())
            prompt = next(p for p in self.mixtures if text.startswith(p))
            for t in range(len(prompt) - 1, n):
                done = text[len(prompt) : t + 1]
                for s, w in self.mixtures[prompt]:
                    if s.startswith(done):
                        full = len(s) == len(done)
                        nxt = self.tok.eos_token_id if full else self.tok.convert_tokens_to_ids(s[len(done)])
                        out[b, t, nxt] += w
        return SimpleNamespace(logits=torch.log(out / out.sum(-1, keepdim=True)))


def _row(rid, a, b):
    ans = str(a + b)
    return {"id": rid, "prompt": f"Q: Compute {a}+{b}.\nA: ", "answer": ans, "solution": f"{a}+{b}={ans}. {boxed(ans)}",
            "decoy": T.decoy_answer(ans), "subset": "probe"}  # fmt: skip


def test_deciding_token_on_scripted_lm():
    tok = build_tokenizer()
    rows = [_row("rare", 9, 8), _row("solved", 3, 4), _row("direct", 40, 7)]
    right = {r["id"]: r["solution"] for r in rows}
    wrong = {r["id"]: T.decoy_solution(r["solution"], r["answer"], r["decoy"]) for r in rows}
    lm = ScriptedLM(tok, {
        rows[0]["prompt"]: [(wrong["rare"], 0.93), (right["rare"], 0.05), (boxed("17"), 0.02)],
        rows[1]["prompt"]: [(right["solved"], 0.7), (wrong["solved"], 0.3)],
        rows[2]["prompt"]: [(boxed("48"), 0.6), (boxed("47"), 0.1), (right["direct"], 0.3)],
    })  # fmt: skip
    rec = {r["id"]: r for r in P.deciding_tokens(lm, tok, rows)}
    r = rec["rare"]  # 9+8=1|7 vs 8: departs at the last digit of the worked result
    assert r["style"] == "worked" and r["position"] == len("9+8=1") and r["correct_token"] == "7"
    assert r["preferred_token"] == "8" and r["prefers_decoy"] and not r["greedy_correct"]
    assert r["p_correct"] == pytest.approx(0.05 / 0.98, rel=1e-3)
    assert r["p_decoy"] == pytest.approx(0.93 / 0.98, rel=1e-3)
    r = rec["solved"]  # greedy already correct: measured where the correct target departs from the decoy
    assert r["greedy_correct"] and r["position"] == len("3+4=") and r["p_correct"] == pytest.approx(0.7, rel=1e-3)
    r = rec["direct"]  # the bare answer is ranked first: \boxed{4|7} vs \boxed{4|8}
    assert r["style"] == "direct" and r["position"] == len("\\boxed{4") and r["correct_token"] == "7"
    assert r["p_correct"] == pytest.approx(0.1 / 0.7, rel=1e-3) and r["prefers_decoy"]
    summary = P.summarize_deciding(list(rec.values()))
    assert summary["n"] == 3 and summary["greedy_correct_share"] == pytest.approx(1 / 3)
    assert summary["p_correct_in_band"] == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------------------------------
# a real tiny model: the batched teacher-forced pass agrees with HF greedy generation; the CLI end to end
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def probe_model(tmp_path_factory):
    torch.set_num_threads(1)
    data = tmp_path_factory.mktemp("probe-data")
    tasks_main(["tiny-math", "--out", str(data), "--seed", "0", "--n-train", "3000", "--n-val", "30", "--n-test",
                "45", "--probe", json.dumps({"decoy_share": 0.9, "n_test": 8, "n_val": 2})])  # fmt: skip
    out = tmp_path_factory.mktemp("probe-models") / "tiny-test"
    build_model("tiny-test", data, out, seed=0, threads=1, progress=False, steps=60, eval_limit=4)
    return data, out


def test_deciding_token_matches_greedy_generation(probe_model):
    data, model_dir = probe_model
    model, tok = load_model(model_dir)
    rows = [r for r in read_jsonl(data / "test.jsonl") if r["subset"] == "probe"]
    recs = P.deciding_tokens(model, tok, rows, batch_size=3)
    for row, rec in zip(rows, recs, strict=True):
        target = row["solution"] if rec["style"] == "worked" else boxed(row["answer"])
        enc = tok(row["prompt"], return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            g = model.generate(**enc, do_sample=False, max_new_tokens=len(target), eos_token_id=None,
                               pad_token_id=tok.pad_token_id)  # fmt: skip
            logits = model(input_ids=tok(row["prompt"] + target[: rec["position"]], return_tensors="pt",
                                         add_special_tokens=False)["input_ids"]).logits[0, -1]  # fmt: skip
        greedy = tok.decode(g[0, enc["input_ids"].shape[1] :])
        first = next((i for i, (x, y) in enumerate(zip(greedy, target, strict=False)) if x != y), None)
        if not rec["greedy_correct"]:
            assert first == rec["position"]
        p = torch.softmax(logits.float(), -1)[tok.convert_tokens_to_ids(rec["correct_token"])]
        assert float(p) == pytest.approx(rec["p_correct"], rel=1e-4, abs=1e-7)


def test_measure_cli(probe_model, tmp_path, capsys):
    data, model_dir = probe_model
    out = tmp_path / "m.json"
    assert P.main(["measure", "--model", str(model_dir), "--data", str(data), "--k", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    n_probe = sum(r["subset"] == "probe" for r in read_jsonl(data / "test.jsonl"))
    assert res["deciding"]["n"] == len(res["records"]) == res["probe"]["n_problems"] == n_probe
    assert res["probe"]["n_problems"] + res["rest"]["n_problems"] == len(read_jsonl(data / "test.jsonl"))
    q = res["deciding"]["p_correct"]
    assert 0.0 <= q["min"] <= q["q25"] <= q["median"] <= q["q75"] <= q["max"] <= 1.0
    assert 0.0 <= res["probe"]["sampled"] <= 1.0 and 0.0 <= res["rest"]["greedy"] <= 1.0
