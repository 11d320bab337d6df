"""bandpo.score.evaluate: the k-sample metrics, the lm-eval task hooks and YAMLs, and a real lm-eval run whose results
file
agrees with a direct computation from its own samples file."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bandpo.core.files import read_jsonl
from bandpo.plan.validate import TASKS_DIR
from bandpo.score import evaluate as ev

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------------------------
# pass@k, mean@k, maj@k, bootstrap best@k


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n samples (c correct) that hold at least one correct sample."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert ev.pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_closed_form_values():
    assert ev.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert ev.pass_at_k(32, 0, 32) == 0.0
    assert ev.pass_at_k(32, 1, 32) == 1.0  # k = n: any correct sample
    assert ev.pass_at_k(32, 31, 2) == 1.0  # n - c < k
    for n, c in [(8, 3), (32, 7), (100, 13)]:
        assert ev.pass_at_k(n, c, 1) == pytest.approx(c / n)  # pass@1 = mean accuracy
        values = [ev.pass_at_k(n, c, k) for k in range(1, n + 1)]
        assert all(a <= b + 1e-15 for a, b in itertools.pairwise(values))  # non-decreasing in k
    # exact for large n (integer arithmetic): 1 - C(900, 64)/C(1000, 64) against the product form
    prod = math.prod(1 - 64 / i for i in range(901, 1001))
    assert ev.pass_at_k(1000, 100, 64) == pytest.approx(1 - prod, rel=1e-12)


@pytest.mark.parametrize("args", [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_bad_arguments(args):
    with pytest.raises(ValueError):
        ev.pass_at_k(*args)
    with pytest.raises(TypeError):
        ev.pass_at_k(4.0, 1, 1)


def test_pass_ks_and_metric_names():
    assert ev.pass_ks(1) == [1]
    assert ev.pass_ks(6) == [2, 4, 6]
    assert ev.pass_ks(8) == [2, 4, 8]
    assert ev.pass_ks(32) == [2, 4, 8, 16, 32]
    assert ev.metric_names(8) == ["mean@8", "pass@2", "pass@4", "pass@8", "maj@8", "best@8_bootstrap"]


def test_bootstrap_best_at_k():
    assert ev.best_at_k_bootstrap([0.0] * 8, 8) == 0.0
    assert ev.best_at_k_bootstrap([1.0] * 8, 8) == 1.0
    x = [1.0, 0.0, 0.0, 0.0]
    a = ev.best_at_k_bootstrap(x, 4, seed=3)
    assert a == ev.best_at_k_bootstrap(x, 4, seed=3)  # seeded
    # expectation of the bootstrap: 1 - (1 - c/n)^k
    big = ev.best_at_k_bootstrap(x, 4, resamples=200_000, seed=1)
    assert big == pytest.approx(1 - 0.75**4, abs=5e-3)
    # the bootstrap variant is biased low against the unbiased pass@k at k = n (here 1.0)
    assert big < ev.pass_at_k(4, 1, 4)
    assert ev.bootstrap_seed("test-000001") == ev.bootstrap_seed("test-000001")


def test_majority_answer():
    idx, ans = ev.majority_answer(["\\boxed{3}", "\\boxed{ 4 }", "\\boxed{4}", "\\boxed{3}", "nothing"])
    assert (idx, ans) == (0, "3")  # tie 2-2: the answer seen first
    idx, ans = ev.majority_answer(["x", "The answer is 2. \\boxed{5", "\\boxed{5}"])
    assert (idx, ans) == (1, "5")  # a truncated \boxed{5 (stop sequence ate the brace) counts
    assert ev.majority_answer(["no answer", ""]) == (None, None)


def test_score_responses():
    responses = ["1+1=2. \\boxed{2}", "\\boxed{2", "\\boxed{3}", "\\boxed{3}", "\\boxed{3}", "junk", "", "\\boxed{2}"]
    m = ev.score_responses(responses, "2", key="p1")
    assert list(m) == ev.metric_names(8)
    assert m["mean@8"] == pytest.approx(3 / 8)  # the truncated "\boxed{2" is graded correct
    assert m["pass@2"] == pytest.approx(ev.pass_at_k(8, 3, 2))
    assert m["pass@8"] == 1.0
    assert m["maj@8"] == 1.0  # "2" and "3" tie 3 to 3 ("\boxed{2" votes too); "2" was seen first
    m2 = ev.score_responses(["\\boxed{7}"] * 2 + ["\\boxed{2}"], "2", key="p2")
    assert m2["maj@3"] == 0.0 and m2["mean@3"] == pytest.approx(1 / 3)
    m3 = ev.score_responses(["\\boxed{2}"] * 2 + ["\\boxed{7}"], "2", key="p3")
    assert m3["maj@3"] == 1.0


def test_score_responses_majority_tie_goes_to_first_seen():
    # 3 x "2" and 3 x "3": "2" is seen first, so maj is correct
    m = ev.score_responses(["\\boxed{2}", "\\boxed{3}"] * 3, "2")
    assert m["maj@6"] == 1.0


def test_hooks():
    resps = [["a", "b"], ("c", "d")]
    assert ev.keep_all_samples(resps, [{}, {}]) == [["a", "b"], ["c", "d"]]
    out = ev.process_results({"id": "q", "answer": "4"}, [["\\boxed{4}", "\\boxed{5}"]])
    assert out["mean@2"] == 0.5 and out["pass@2"] == 1.0
    with pytest.raises(ValueError, match="keep_all_samples"):
        ev.process_results({"id": "q", "answer": "4"}, ["\\boxed{4}"])  # take_first would pass one string


def test_subset_hooks_keep_their_subset():
    """tiny_math_probe / tiny_math_rest (process_docs) keep one subset of a probe data set; other data is refused."""
    import datasets

    data = datasets.Dataset.from_list([{"id": str(i), "subset": s} for i, s in enumerate(["probe", "rest", "rest"])])
    assert ev.probe_docs(data)["id"] == ["0"] and ev.rest_docs(data)["id"] == ["1", "2"]
    with pytest.raises(ValueError, match="no 'subset' column"):
        ev.probe_docs(datasets.Dataset.from_list([{"id": "0"}]))
    with pytest.raises(ValueError, match="no row of that subset"):
        ev.probe_docs(data.select([1, 2]))


# ----------------------------------------------------------------------------------------------------------------
# task YAMLs


def task_yamls():
    return sorted(TASKS_DIR.glob("*.yaml"))


@pytest.mark.parametrize("path", task_yamls(), ids=lambda p: p.stem)
def test_task_yaml_is_consistent(path):
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(path, resolve_func=True)
    assert cfg["task"] == path.stem
    n = cfg["repeats"]
    assert [m["metric"] for m in cfg["metric_list"]] == ev.metric_names(n)
    assert all(m["aggregation"] == "mean" and m["higher_is_better"] for m in cfg["metric_list"])
    gen = cfg["generation_kwargs"]
    assert gen["do_sample"] is True and gen.get("top_p", 1.0) == 1.0
    # the real LM's answer-line task samples at T = 0.7, the temperature of the format chosen in config/real-lm.yaml
    assert gen["temperature"] == (0.7 if path.stem == "tiny_math_answer_line" else 1.0)
    assert cfg["doc_to_text"] == "prompt" and cfg["doc_to_target"] == "answer"
    (flt,) = cfg["filter_list"]
    assert flt["name"] == ev.FILTER_NAME
    assert flt["filter"][0]["filter_fn"] is ev.keep_all_samples
    assert cfg["process_results"] is ev.process_results
    tiny = path.stem.startswith("tiny_math")  # tiny_math and its probe subsets (tiny_math_probe, tiny_math_rest)
    assert n == (8 if tiny else 32)
    if tiny:
        from bandpo.models.tiny import MAX_NEW_TOKENS

        assert gen["top_k"] == 0  # HF would apply top_k=50
        assert gen["max_gen_toks"] == (32 if path.stem == "tiny_math_answer_line" else MAX_NEW_TOKENS)
    else:
        assert gen["max_gen_toks"] == 4096


def test_answer_line_task_renders_the_trainers_prompt(tmp_path):
    """tiny_math_answer_line: lm-eval's multi-turn few-shot context under a chat template (its default with
    apply_chat_template) is, to the character, the prompt the trainer samples from (`chat_prompts` of the row's
    prompt and shots)."""
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    from bandpo.data.tiny_math import generate_tiny_math, write_jsonl
    from bandpo.models.tiny import build_tokenizer
    from bandpo.train.loop import chat_prompts

    tok = build_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # fmt: skip
    rows = generate_tiny_math(seed=0, n_train=8, n_val=4, n_test=4, levels=(1,), prompt_format="answer-line")["test"]
    write_jsonl(tmp_path / "test.jsonl", rows)
    tm = TaskManager(include_path=str(TASKS_DIR))
    cfg = ev.task_config(tm, "tiny_math_answer_line", str(tmp_path / "test.jsonl"))
    (task,) = tm.load([cfg])["tasks"].values()

    def render(history, add_generation_prompt=True):
        return tok.apply_chat_template(history, tokenize=False, add_generation_prompt=add_generation_prompt)

    docs = list(task.test_docs())
    assert len(docs) == 4
    for doc in docs:
        ctx = task.fewshot_context(doc, num_fewshot=cfg["num_fewshot"], apply_chat_template=True,
                                   fewshot_as_multiturn=True, chat_template=render)  # fmt: skip
        assert ctx == chat_prompts(tok, [doc["prompt"]], [doc["shots"]])[0]
        assert ctx.count("<|im_start|>user") == 5 and "Answer: 19-4*4=3<|im_end|>" in ctx


# ----------------------------------------------------------------------------------------------------------------
# a real lm-eval run


# A "bigram" Llama: attention and MLP outputs are zero, so the next-token distribution depends on the current token
# only, through lm_head[:, current]. After the prompt's final space it writes "\boxed{" and then 1, 2 or 3 with
# probabilities 0.5 / 0.3 / 0.2, then "}" and EOS: sampled answers with known odds, in well under a second.
DIGIT_PROBS = {"1": 0.5, "2": 0.3, "3": 0.2}


def build_bigram_model(out_dir: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from bandpo.models.tiny import build_tokenizer, make_generation_config

    tok = build_tokenizer()
    v = len(tok)
    h = v + v % 2  # one hidden unit per token (rotary embeddings want an even head size)
    cfg = LlamaConfig(
        vocab_size=v, hidden_size=h, intermediate_size=4, num_hidden_layers=1, num_attention_heads=1,
        num_key_value_heads=1, head_dim=h, max_position_embeddings=256, tie_word_embeddings=False, rms_norm_eps=1e-9,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    ids = {ch: tok.convert_tokens_to_ids(ch) for ch in "\\boxed{}123 "}
    eos = tok.eos_token_id
    table = torch.full((v, v), -40.0)  # table[next, current] = log p(next | current)
    table[eos, :] = 0.0  # default: stop
    chain = [" ", "\\", "b", "o", "x", "e", "d", "{"]
    for cur, nxt in itertools.pairwise(chain):
        table[:, ids[cur]] = -40.0
        table[ids[nxt], ids[cur]] = 0.0
    table[:, ids["{"]] = -40.0
    for d, p in DIGIT_PROBS.items():
        table[ids[d], ids["{"]] = math.log(p)
        table[:, ids[d]] = -40.0
        table[ids["}"], ids[d]] = 0.0
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(v, h))
        model.model.norm.weight.fill_(1.0 / math.sqrt(h))  # RMSNorm(one-hot) = one-hot
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, :v].copy_(table)
    model.generation_config = make_generation_config(tok)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def write_problems(path: Path, n: int = 24) -> list[dict]:
    rows = []
    for i in range(n):
        answer = "1234"[i % 4]  # "4" is never sampled
        rows.append({"id": f"q{i:03d}", "prompt": f"Q: item {i}\nA: ", "answer": answer, "problem": f"item {i}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def expected_metrics(samples: list[dict], n: int) -> dict[str, float]:
    """Recompute every metric from lm-eval's samples file alone (its filtered samples and targets)."""
    from bandpo.grader import grade

    per_doc = []
    for s in samples:
        (responses,) = s["filtered_resps"]
        assert len(responses) == n and s["filter"] == ev.FILTER_NAME
        scores = [grade(r, s["target"]) for r in responses]
        c = int(sum(scores))
        idx, _ = ev.majority_answer(responses)
        row = {f"mean@{n}": c / n, f"maj@{n}": 0.0 if idx is None else scores[idx]}
        row.update({f"pass@{k}": ev.pass_at_k(n, c, k) for k in ev.pass_ks(n)})
        row[f"best@{n}_bootstrap"] = ev.best_at_k_bootstrap(scores, n, seed=ev.bootstrap_seed(s["doc"]["id"]))
        per_doc.append(row)
    return {k: sum(r[k] for r in per_doc) / len(per_doc) for k in per_doc[0]}


@pytest.fixture(scope="module")
def lm_eval_runs(tmp_path_factory):
    pytest.importorskip("lm_eval")
    tmp = tmp_path_factory.mktemp("lm_eval")
    model = build_bigram_model(tmp / "bigram")
    data = tmp / "test.jsonl"
    rows = write_problems(data)
    run_dir = tmp / "runs" / "grpo"  # a trained run's record: evaluation reads its method from run.json
    run_dir.mkdir(parents=True)
    info = {"config": {"method": "grpo"}, "method": "grpo", "method_params": {"eps_low": 0.2, "eps_high": 0.2}}
    (run_dir / "run.json").write_text(json.dumps(info))
    runs = [
        ev.EvalRun(str(model), str(tmp / "out" / "a"), seed=0, meta={"model": "bigram", "entry": "base"}),
        ev.EvalRun(str(model), str(tmp / "out" / "b"), seed=0, meta={"model": "bigram", "run_dir": str(run_dir)}),
        ev.EvalRun(str(model), str(tmp / "out" / "c"), seed=1, meta={"model": "bigram", "entry": "base"}),
    ]
    summaries = ev.evaluate_runs(
        runs, {"tiny_math": str(data)}, TASKS_DIR, backend="hf", model_args={"dtype": "float32", "device": "cpu"},
        batch_size=256, threads=1,
    )  # fmt: skip
    return runs, summaries, rows


def test_lm_eval_results_match_samples(lm_eval_runs):
    runs, summaries, rows = lm_eval_runs
    assert len(summaries) == 3
    out = Path(runs[0].out_dir)
    assert sorted(p.name for p in out.iterdir()) == [
        "lm_eval_results.json",
        "tiny_math.json",
        "tiny_math.samples.jsonl",
    ]
    results = json.loads((out / "lm_eval_results.json").read_text())
    samples = read_jsonl(out / "tiny_math.samples.jsonl")
    assert len(samples) == len(rows)
    n = results["configs"]["tiny_math"]["repeats"]
    assert n == 8
    # prompts reach the model verbatim, trailing space included
    assert samples[0]["arguments"]["gen_args_0"]["arg_0"] == rows[samples[0]["doc_id"]]["prompt"]
    want = expected_metrics(samples, n)
    got = {k[: -len(",all_k")]: v for k, v in results["results"]["tiny_math"].items() if k.endswith(",all_k")}
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name
    # per-problem values in the samples file are lm-eval's inputs to its mean aggregation
    for name in want:
        assert sum(s[name] for s in samples) / len(samples) == pytest.approx(got[name], abs=1e-12)
    # the sampled answers follow the bigram model's odds: mean@8 = (0.5 + 0.3 + 0.2 + 0) / 4 on average
    assert 0.12 < got["mean@8"] < 0.38
    assert got["pass@8"] >= got["pass@4"] >= got["pass@2"] >= got["mean@8"]
    # the summary is read from lm-eval's results file
    summary = json.loads((out / "tiny_math.json").read_text())
    assert summary["metrics"] == {k: got[k] for k in ev.metric_names(8)}
    assert summary["k"] == 8 and summary["n_problems"] == len(rows) and summary["seed"] == 0
    assert summary["lm_eval"]["random_seed"] == 0 and summary["lm_eval"]["model"] == "hf"
    assert summary["grader"]["name"] == "bandpo.grader"
    assert summary["model"] == "bigram" and summary["entry"] == "base"


def test_lm_eval_runs_are_seeded(lm_eval_runs):
    runs, summaries, _ = lm_eval_runs
    resp = [[s["filtered_resps"] for s in read_jsonl(Path(r.out_dir) / "tiny_math.samples.jsonl")] for r in runs]
    assert resp[0] == resp[1]  # same seed, same samples (two runs in one process)
    assert resp[0] != resp[2]  # another seed, other samples
    # a trained run's method comes from its run.json; the base model has none
    assert summaries[1]["method"] == "grpo" and summaries[1]["params"] == {"eps_low": 0.2, "eps_high": 0.2}
    assert summaries[1]["trainer"] == "local"  # run.json names no trainer: the local one
    assert summaries[0]["method"] is None and summaries[0]["params"] is None


def test_a_scored_run_names_its_method_in_run_json_only(tmp_path):
    assert ev.run_method({"entry": "base"}) == {"method": None, "params": None}
    info = {"trainer": "verl", "config": {"method": "dcpo"}, "method_params": {}}
    (tmp_path / "run.json").write_text(json.dumps(info))
    assert ev.run_method({"run_dir": str(tmp_path)}) == {"method": "dcpo", "params": {}, "trainer": "verl"}
    with pytest.raises(ValueError, match="cannot read its run.json"):
        ev.run_method({"run_dir": str(tmp_path / "missing")})


def test_the_suites_own_model_class_gives_the_hf_backends_completions(tmp_path):
    """``bandpo-tiny`` (bandpo.score.tiny_lm, from lm-eval's model registry) and the ``hf`` backend score a tiny Llama
    the suite built with the same completions and metrics for a seed; the own class never imports transformers."""
    pytest.importorskip("lm_eval")
    from bandpo.models.tiny import build_tokenizer, get_size, init_model
    from bandpo.runtime.fastlm import light_loadable

    tok = build_tokenizer()
    model_dir = tmp_path / "tiny"
    init_model(get_size("tiny-test"), tok, seed=3).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    assert light_loadable(model_dir)
    data = tmp_path / "test.jsonl"
    write_problems(data)
    out = {}
    for backend in ("hf", "bandpo-tiny"):
        runs = [ev.EvalRun(str(model_dir), str(tmp_path / backend / f"s{seed}"), seed=seed,
                           meta={"model": "tiny", "entry": "base"}) for seed in (0, 1)]  # fmt: skip
        args = {"dtype": "float32", "device": "cpu"}
        out[backend] = ev.evaluate_runs(runs, {"tiny_math": str(data)}, TASKS_DIR, backend=backend, model_args=args,
                                        batch_size=256, threads=1)  # fmt: skip
    for seed in (0, 1):
        hf, own = (read_jsonl(tmp_path / b / f"s{seed}" / "tiny_math.samples.jsonl") for b in ("hf", "bandpo-tiny"))
        assert [s["resps"] for s in own] == [s["resps"] for s in hf] and any(r for s in own for r in s["resps"][0])
        assert out["bandpo-tiny"][seed]["metrics"] == out["hf"][seed]["metrics"]
        assert out["bandpo-tiny"][seed]["lm_eval"]["model"] == "bandpo-tiny"
    code = "import sys, bandpo.score.tiny_lm; print(any(m.split('.')[0] == 'transformers' for m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_the_suites_own_model_class_refuses_what_it_cannot_score(tmp_path):
    pytest.importorskip("lm_eval")
    from bandpo.score.tiny_lm import TinyLM, plain_sampling

    with pytest.raises(ValueError, match="is not a tiny Llama folder the suite built.*--backend hf"):
        TinyLM(pretrained=str(tmp_path))
    assert plain_sampling({"do_sample": True, "temperature": 1.0, "until": [], "max_gen_toks": 8}, ["<eos>"], "<eos>")
    assert not plain_sampling({"do_sample": True, "temperature": 1.0, "top_p": 0.9}, ["<eos>"], "<eos>")
    assert not plain_sampling({"do_sample": False, "temperature": 0.0}, ["<eos>"], "<eos>")
    assert not plain_sampling({"do_sample": True, "temperature": 1.0}, ["\n\n", "<eos>"], "<eos>")
