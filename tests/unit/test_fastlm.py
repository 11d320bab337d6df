"""bandpo.runtime.fastlm: the lean Llama forward computes the HF model's function (logits, log-probs, gradients) up to
float rounding, for the tiny models' layout and for a real LM's (grouped-query attention, tied embeddings, its own
rope theta and RMSNorm eps: SmolLM2's); the sampler on it draws from the model's softmax; the transformers-free loader
holds the same weights, tokenizes and decodes as the HF tokenizer and saves what HF loads back."""

from __future__ import annotations

import json

import pytest
import torch

from bandpo.models.tiny import build_tokenizer, get_size, init_model
from bandpo.runtime import sampling
from bandpo.runtime.fastlm import FastLlama, TinyLlama, gather_rows, light_loadable, load_light
from bandpo.train.loop import Batch

PROMPTS = ["Q: Compute 48-6+5.\nA: ", "Q: 1+1?\nA: ", "Q: Solve for x: 3x+8=32.\nA: "]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A small random Llama of the suite's layout (wider than tiny-test so that rounding shows), saved."""
    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    spec = get_size("tiny-test", hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48)
    model = init_model(spec, tokenizer, seed=0).eval()
    path = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, tokenizer, path


def gqa_llama(tokenizer, seed=0):
    """A small random HF ``LlamaForCausalLM`` of SmolLM2's kind: grouped-query attention (6 query heads on 2 key /
    value heads), tied embeddings, rope theta 1e5, RMSNorm eps 1e-5 (SmolLM2-135M: 9 on 3 heads of 64, theta 1e5)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, rope_parameters={"rope_type": "default",
                      "rope_theta": 100000.0}, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so that a wrong eps or a missing norm weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


@pytest.fixture(scope="module")
def gqa(tiny):
    """`gqa_llama` with the suite's character tokenizer."""
    _, tokenizer, _ = tiny
    return gqa_llama(tokenizer), tokenizer, None


@pytest.fixture(params=["tiny", "gqa"])
def any_model(request):
    """The suite's tiny layout (multi-head attention) and a real LM's (grouped-query attention)."""
    return request.getfixturevalue(request.param)


def _hf_only(model):
    """The HF path: FastLlama switched off for this model (as for a model it does not cover)."""
    model.__dict__["_bandpo_fastllama"] = False


def _fast_again(model):
    model.__dict__.pop("_bandpo_fastllama", None)


def _as_batch(ids, mask, tokens, resp, n, eos_id):
    """The trainer's Batch of ``n`` sampled completions per prompt (``tokens`` / ``resp`` from sample_rows)."""
    is_eos = (tokens == eos_id) & resp
    return Batch(
        torch.cat([ids.repeat_interleave(n, 0), tokens], 1),
        torch.cat([mask.repeat_interleave(n, 0), resp.long()], 1),
        resp,
        ids.shape[1],
        [],
        ids,
        mask,
        ~is_eos.any(1),
    )


def _batch(model, tokenizer, n=4, max_new=12, seed=2):
    tokenizer.padding_side = "left"
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    torch.manual_seed(seed)
    tokens, resp, _ = sampling.sample_rows(model, ids, mask, n, max_new, 1.0, tokenizer.eos_token_id)
    return _as_batch(ids, mask, tokens, resp, n, tokenizer.eos_token_id)


def test_fast_path_applies_only_where_it_is_exact(any_model):
    model, _, _ = any_model
    assert FastLlama.for_model(model) is not None
    handle = model.lm_head.register_forward_hook(lambda m, a, out: out)
    try:
        assert FastLlama.for_model(model) is None  # a hooked module: the HF path, which runs the hook
    finally:
        handle.remove()
    assert FastLlama.for_model(model) is not None


def test_fast_path_covers_grouped_query_attention(gqa):
    """SmolLM2's features are covered (K = 2 key / value heads for 6 query heads, the model's own rope table); what
    it does not compute (another rope type, a head count K does not divide, biases) is left to transformers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model, _, _ = gqa
    fast = FastLlama.for_model(model)
    assert (fast.n_heads, fast.n_kv, fast.group, fast.head_dim) == (6, 2, 3, 8)
    assert fast.head is fast.embed  # tied: one parameter, its gradient the sum of both uses
    cfg = model.config.to_dict()
    for change in ({"num_key_value_heads": 4}, {"attention_bias": True},
                   {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e5}}):  # fmt: skip
        other = LlamaForCausalLM(LlamaConfig(**{**cfg, **change}))
        assert FastLlama.for_model(other) is None, change


def test_log_probs_and_gradients_equal_the_hf_forward(any_model):
    model, tokenizer, _ = any_model
    batch = _batch(model, tokenizer)
    idx = torch.tensor([9, 0, 3, 2, 10, 11])
    resp = batch.response_mask[idx]
    out = []
    for fast in (True, False):
        if not fast:
            _hf_only(model)
        try:
            model.zero_grad()
            lp, ent = sampling.completion_log_probs_shared(model, batch, idx, 4, with_entropy=True, temperature=0.7)
            (lp * resp * torch.linspace(-1, 1, resp.shape[1])).sum().backward()
            out.append((lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
        finally:
            _fast_again(model)
    (lp_f, ent_f, g_f), (lp_h, ent_h, g_h) = out
    assert (lp_f[~resp] == 0).all() and (ent_f[~resp] == 0).all()
    assert (lp_f - lp_h)[resp].abs().max() < 1e-5 and (ent_f - ent_h)[resp].abs().max() < 1e-5
    for a, b in zip(g_f, g_h, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gather_rows_is_index_select_to_the_bit():
    """`gather_rows`' own backward sums repeated rows in autograd's order: the same gradient, bit for bit, also for a
    gradient that reaches it sliced (as the update's keys do, through a concatenation)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 7, 4, generator=gen, requires_grad=True)
    index = torch.tensor([3, 0, 3, 3, 1, 4, 0, 3])
    extra = torch.randn(8, 3, 2, 4, generator=gen)
    weight = torch.randn(8, 3, 9, 4, generator=gen)
    grads = []
    for gather in (gather_rows, lambda t, i: t.index_select(0, i)):
        y = torch.cat([gather(x, index), extra], 2)
        assert torch.equal(y[:, :, :7], x.detach().index_select(0, index))
        (grad,) = torch.autograd.grad((y * weight).sum(), x)
        grads.append(grad)
    assert torch.equal(grads[0], grads[1])
    assert gather_rows(x.detach(), index).grad_fn is None


def test_sampler_log_probs_are_the_recomputed_ones(any_model):
    model, tokenizer, _ = any_model
    tokenizer.padding_side = "left"
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(5)
    tokens, resp, ent, lp = sampling.sample_rows(
        model,
        enc["input_ids"],
        enc["attention_mask"],
        8,
        24,
        0.8,
        tokenizer.eos_token_id,
        with_entropy=True,
        with_log_probs=True,
    )
    n = 8
    batch = _as_batch(enc["input_ids"], enc["attention_mask"], tokens, resp, n, tokenizer.eos_token_id)
    with torch.no_grad():
        rec_lp, rec_ent = sampling.completion_log_probs_shared(
            model, batch, torch.arange(3 * n), n, with_entropy=True, temperature=0.8
        )
    assert (rec_lp - lp)[resp].abs().max() < 1e-5 and (rec_ent - ent)[resp].abs().max() < 1e-5


def test_fast_sampler_first_token_follows_the_softmax(any_model):
    model, tokenizer, _ = any_model
    tokenizer.padding_side = "left"
    enc = tokenizer(PROMPTS[:1], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        logits = model(**enc).logits[0, -1]
    torch.manual_seed(0)
    draws = 20000
    tokens, _, _ = sampling.sample_rows(
        model, enc["input_ids"], enc["attention_mask"], draws, 1, 1.0, tokenizer.eos_token_id
    )
    freq = torch.bincount(tokens[:, 0], minlength=logits.numel()).double() / draws
    p = torch.softmax(logits.double(), -1)
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / draws).sqrt() + 1e-4).all()


def test_same_seed_same_sample(any_model):
    model, tokenizer, _ = any_model
    a, b = (_batch(model, tokenizer, n=8, max_new=24, seed=11) for _ in range(2))
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.response_mask, b.response_mask)


def test_light_loader_is_the_hf_model_and_tokenizer(tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, _, path = tiny
    assert light_loadable(path)
    model, tok = load_light(path)
    assert type(model) is TinyLlama
    hf = AutoModelForCausalLM.from_pretrained(path).eval()
    hf_tok = AutoTokenizer.from_pretrained(path)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in hf.named_parameters()]
    assert list(model.state_dict()) == list(hf.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), hf.state_dict().values(), strict=True))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    texts = PROMPTS + ["héllo\tworld", ""]
    for side in ("left", "right"):
        tok.padding_side = hf_tok.padding_side = side
        a = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        b = hf_tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["attention_mask"], b["attention_mask"])
    assert tok(texts, add_special_tokens=False)["input_ids"] == hf_tok(texts, add_special_tokens=False)["input_ids"]
    ids = torch.randint(0, len(hf_tok), (16, 20), generator=torch.Generator().manual_seed(0))
    assert tok.batch_decode(ids, skip_special_tokens=True) == hf_tok.batch_decode(ids, skip_special_tokens=True)
    assert (tok.pad_token_id, tok.eos_token_id, len(tok)) == (hf_tok.pad_token_id, hf_tok.eos_token_id, len(hf_tok))
    x = torch.randint(3, len(hf_tok), (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(x)
    mask[0, 6:] = 0  # right padding, as bandpo.train.probe uses it
    with torch.no_grad():
        diff = model(input_ids=x, attention_mask=mask).logits - hf(input_ids=x, attention_mask=mask).logits
    assert diff[mask.bool()].abs().max() < 1e-5

    with torch.no_grad():
        next(model.parameters()).add_(0.5)  # a "trained" model: saved, then loaded back by HF
    model.save_pretrained(tmp_path / "out")
    tok.save_pretrained(tmp_path / "out")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values(), strict=True))
    assert AutoTokenizer.from_pretrained(tmp_path / "out")(texts[0])["input_ids"] == hf_tok(texts[0])["input_ids"]
    assert json.loads((tmp_path / "out" / "config.json").read_text()) == json.loads((path / "config.json").read_text())


def test_other_models_are_not_light_loadable(tiny, tmp_path):
    _, _, path = tiny
    cfg = json.loads((path / "config.json").read_text())
    for change in (
        {"attention_bias": True},
        {"tie_word_embeddings": False},
        {"model_type": "qwen2"},
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
    ):
        other = tmp_path / str(len(list(tmp_path.iterdir())))
        other.mkdir()
        for f in path.iterdir():
            (other / f.name).write_bytes(f.read_bytes())
        (other / "config.json").write_text(json.dumps({**cfg, **change}))
        assert not light_loadable(other), change


def test_lm_eval_plain_sampling_takes_the_suite_sampler(tiny, monkeypatch):
    """bandpo.score.evaluate's hf backend: a plain-sampling request of a covered model is drawn by the suite's sampler
    (each repeated prompt pre-filled once; completions end at EOS, padded after), from the model's softmax; a
    request with top-k goes to HF ``generate``."""
    from bandpo.score.evaluate import suite_sampler_hflm

    _fast_again(tiny[0])
    model, tokenizer, path = tiny
    lm = suite_sampler_hflm()(pretrained=str(path), dtype="float32", device="cpu", batch_size=64)
    enc = tokenizer([PROMPTS[0]] * 400 + [PROMPTS[1]] * 400, return_tensors="pt", padding=True)
    eos = tokenizer.decode(lm.eot_token_id, skip_special_tokens=False)
    from lm_eval.models.huggingface import HFLM

    generate_calls = []
    parent = HFLM._model_generate
    monkeypatch.setattr(
        HFLM, "_model_generate", lambda self, *a, **k: generate_calls.append(k) or parent(self, *a, **k)
    )
    torch.manual_seed(0)
    ctx, mask = enc["input_ids"], enc["attention_mask"]
    out = lm._model_generate(ctx, ctx.shape[1] + 1, [eos], do_sample=True, temperature=1.0, attention_mask=mask)
    assert not generate_calls  # plain sampling: the suite's sampler
    assert out.shape == (800, ctx.shape[1] + 1) and torch.equal(out[:, : ctx.shape[1]], ctx)
    with torch.no_grad():  # first-token frequencies against the model's softmax, per prompt
        logits = model(input_ids=ctx[[0, 400]], attention_mask=mask[[0, 400]]).logits[:, -1].float()
    probs = torch.softmax(logits, -1)
    for row, start in ((0, 0), (1, 400)):
        freq = torch.bincount(out[start : start + 400, -1], minlength=probs.shape[1]).float() / 400
        top = probs[row].topk(3).indices
        assert (freq[top] - probs[row, top]).abs().max() < 0.08, (freq[top], probs[row, top])
    torch.manual_seed(0)
    ref = lm._model_generate(ctx[:4], ctx.shape[1] + 1, [eos], do_sample=True, temperature=1.0, top_k=5,
                             attention_mask=mask[:4])  # fmt: skip
    assert ref.shape[0] == 4 and len(generate_calls) == 1  # top-k: HF generate, not the suite sampler


def test_sampler_benchmark_rejects_bad_input(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_sampler.py"
    spec = importlib.util.spec_from_file_location("bench_sampler", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit, match="must be >= 1"):
        bench.main(["--repeats", "0"])
    with pytest.raises(SystemExit, match="not a tiny Llama"):
        bench.main(["--model", str(tmp_path / "missing")])
    with pytest.raises(SystemExit):  # argparse: not a variant
        bench.main(["--variants", "cuda"])


def test_draw_follows_the_distribution_for_a_large_vocabulary():
    """A real LM's vocabulary: the inverse distribution function over blocks draws each token with its probability
    (within 5 standard errors), never one of probability 0, and hits single tokens at the blocks' edges."""
    V = sampling.MULTINOMIAL_MAX_VOCAB + 904  # not a multiple of the block: the last block padded
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(V, generator=gen) * 3
    logits[1::2] = float("-inf")
    probs = torch.softmax(logits, -1)
    torch.manual_seed(0)
    draws = 40000
    tokens = torch.cat([sampling.draw(probs.expand(2000, V)) for _ in range(draws // 2000)])
    assert tokens.dtype == torch.int64 and int(tokens.min()) >= 0 and int(tokens.max()) < V
    assert (tokens % 2 == 0).all()  # probability 0: never drawn
    freq = torch.bincount(tokens, minlength=V).double() / draws
    p = probs.double()
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / draws).sqrt() + 1e-4).all()
    edges = [0, sampling.DRAW_BLOCK - 1, sampling.DRAW_BLOCK, V - 1]
    one_hot = torch.zeros(len(edges), V)
    one_hot[torch.arange(len(edges)), edges] = 1.0
    assert sampling.draw(one_hot).tolist() == edges
    small = torch.softmax(torch.randn(3, 50, generator=gen), -1)  # a tiny model's vocabulary: torch.multinomial
    torch.manual_seed(1)
    expected = torch.multinomial(small, 1).squeeze(1)
    torch.manual_seed(1)
    assert torch.equal(sampling.draw(small), expected)


@pytest.mark.parametrize("V", [50, sampling.MULTINOMIAL_MAX_VOCAB + 904])
def test_keyed_draws_follow_the_distribution_and_are_a_function_of_their_key(V):
    """Common random numbers (`sampling.draw_keys`, `keyed_uniforms`): a tiny model's vocabulary and a real LM's
    both go through the inverse distribution function, which draws each token with its probability (within 5
    standard errors) and never one of probability 0; the uniform numbers are fixed bits of (seed, step, prompt, sample,
    position) alone, do not depend on torch's generator, and differ between keys."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(V, generator=gen) * 2
    logits[1::2] = float("-inf")
    probs = torch.softmax(logits, -1)
    draws = 40000
    keys = sampling.draw_keys(7, 3, range(draws // 8), 8)
    assert keys.dtype.name == "uint64" and len(set(keys.tolist())) == draws
    torch.manual_seed(0)
    tokens = sampling.draw(probs.expand(draws, V), sampling.keyed_uniforms(keys, 5))
    torch.manual_seed(1)  # another generator state: the same tokens
    assert torch.equal(sampling.draw(probs.expand(draws, V), sampling.keyed_uniforms(keys, 5)), tokens)
    assert (tokens % 2 == 0).all()
    freq = torch.bincount(tokens, minlength=V).double() / draws
    p = probs.double()
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / draws).sqrt() + 1e-4).all()
    # the bits: SplitMix64, as written in the module's docstring, for seed 0, step 0, prompt 0, sample 0, position 0
    u = sampling.keyed_uniforms(sampling.draw_keys(0, 0, [0], 1), 0)
    assert u.dtype == torch.float64 and 0.0 <= float(u[0]) < 1.0
    assert float(u[0]) == float(sampling.keyed_uniforms(sampling.draw_keys(0, 0, [0], 1), 0)[0])
    assert not torch.equal(sampling.keyed_uniforms(keys, 5), sampling.keyed_uniforms(keys, 6))
    assert sampling.draw_keys(-1, -3, [2], 2).tolist() != sampling.draw_keys(1, 3, [2], 2).tolist()


def test_keyed_rollouts_share_their_draws_between_policies(any_model):
    """Two runs of a pair sample with the same keys: the same policy gives the same completions whatever torch's
    generator holds; another policy (the weights moved a little) gives completions that agree with the first one's
    up to the first position where the two distributions send the same number to different tokens, far more than
    two independent streams of draws agree (the coupling of common random numbers)."""
    model, tokenizer, _ = any_model
    tokenizer.padding_side = "left"
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    n, max_new = 16, 16
    keys = sampling.draw_keys(4, 9, [0, 1, 2], n)

    def sample(m, keys, seed):
        torch.manual_seed(seed)
        with torch.no_grad():
            tokens, mask, _ = sampling.sample_rows(m, enc["input_ids"], enc["attention_mask"], n, max_new, 1.0,
                                                   tokenizer.eos_token_id, keys=keys)  # fmt: skip
        return tokens * mask

    a = sample(model, keys, 0)
    assert torch.equal(a, sample(model, keys, 123))  # a function of the keys, not of the generator
    other = type(model)(model.config).eval()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        for w in other.parameters():
            w.add_(0.005 * torch.randn(w.shape, generator=torch.Generator().manual_seed(w.numel())))

    def common_prefix(b):  # mean number of leading positions where the two completions agree
        return float((a == b).long().cumprod(1).sum(1).double().mean())

    shared, independent = common_prefix(sample(other, keys, 1)), common_prefix(sample(other, None, 1))
    assert shared > 3 * independent + 1, (shared, independent)
    with pytest.raises(ValueError, match="keys: one per row"):
        sampling.sample_rows(model, enc["input_ids"], enc["attention_mask"], n, 2, 1.0, tokenizer.eos_token_id,
                             keys=keys[:-1])  # fmt: skip
