"""bandpo.runtime.ckernel: the sampler's attention step in C computes the PyTorch decode's function (logits to float
rounding, the KV cache to the bit), the same bits for a row whatever its batch or its prompt's padding, and refuses
what it cannot run."""

from __future__ import annotations

import os
import platform
import shutil

import pytest
import torch

from bandpo.core import numerics
from bandpo.models.tiny import build_tokenizer, get_size, init_model
from bandpo.runtime import ckernel, sampling
from bandpo.runtime.fastlm import FastLlama
from bandpo.train.settings import TrainConfig

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 only")
needs_cc = pytest.mark.skipif(
    not (os.environ.get("CC") or any(shutil.which(c) for c in ("cc", "gcc", "clang"))), reason="no C compiler"
)

PROMPTS = ["Q: Compute 48-6+5.\nA: ", "Q: 1+1?\nA: ", "Q: Solve for x: 3x+8=32.\nA: "]


@pytest.fixture(scope="module", params=[(32, 4), (64, 4), "gqa"], ids=["head_dim8", "head_dim16", "gqa_head_dim16"])
def model(request):
    """Small random Llamas of the suite's layout: head_dim 8 (the kernel's 4-lane path) and 16 (its 16-lane one);
    and a random HF Llama of SmolLM2's kind: grouped-query attention (6 query heads on 2 key / value heads), tied
    embeddings, rope theta 1e5."""
    tokenizer = build_tokenizer()
    if request.param == "gqa":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=96, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=6, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                          rms_norm_eps=1e-5, tie_word_embeddings=True,
                          rope_parameters={"rope_type": "default", "rope_theta": 100000.0})  # fmt: skip
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).eval(), tokenizer
    hidden, heads = request.param
    spec = get_size("tiny-test", hidden_size=hidden, num_layers=2, num_heads=heads, intermediate_size=48)
    return init_model(spec, tokenizer, seed=0).eval(), tokenizer


def _prompts(tokenizer, prompts=PROMPTS):
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"]


def _decode_both(fast, ids, mask, n, cols, rows=None):
    """Run `FastLlama.decode` for columns ``cols`` with PyTorch and with the kernel from the same caches; return
    per column the two logits and the two caches."""
    G, P = ids.shape
    T = max(cols) + 1
    weights = fast.weights()
    with torch.no_grad():
        _, prompt_kv = fast.prefill(ids, mask, weights)
        rows = torch.arange(G * n) if rows is None else rows
        b = len(rows)
        gen = torch.Generator().manual_seed(0)
        cache = torch.randn(len(weights), 2, b, fast.n_kv, T, fast.head_dim, generator=gen)
        caches = [cache, cache.clone()]
        p_bias = torch.zeros(G, 1, P).masked_fill_(mask.unsqueeze(1) == 0, float("-inf")).repeat_interleave(n, 0)
        p_bias = p_bias[rows].contiguous()
        pos = mask.sum(1).repeat_interleave(n)[rows]
        out = []
        for col in cols:
            tok = torch.randint(3, 20, (b,), generator=gen)
            torch_logits = fast.decode(tok, pos + col, prompt_kv, p_bias, rows, n, caches[0], col, weights)
            c_logits = fast.decode(tok, pos + col, prompt_kv, p_bias, rows, n, caches[1], col, weights,
                                   torch.empty(P + T + 4))  # fmt: skip
            out.append((torch_logits, c_logits, caches[0].clone(), caches[1].clone()))
    return out


@needs_cc
def test_c_attention_is_the_torch_decode(model):
    m, tokenizer = model
    fast = FastLlama.for_model(m)
    ids, mask = _prompts(tokenizer)
    assert (mask == 0).any(), "the prompts must include left padding"
    for rows in (None, torch.tensor([0, 2, 3, 7, 8, 11])):  # every row, and rows left after some finished
        for torch_logits, c_logits, torch_cache, c_cache in _decode_both(fast, ids, mask, 4, [0, 1, 2, 5, 6, 9], rows):
            # the first layer's keys (rope) and values, from the same input, are written as PyTorch writes them;
            # the later layers' inputs differ by the rounding of the attention before them
            assert torch.equal(torch_cache[0], c_cache[0])
            torch.testing.assert_close(c_cache, torch_cache, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(c_logits, torch_logits, rtol=1e-5, atol=1e-5)


@needs_cc
@pytest.mark.parametrize("D, H, K", [(8, 2, 2), (16, 2, 2), (20, 2, 2), (16, 6, 2)])
def test_a_row_gets_the_same_bits_in_any_batch_and_with_any_padding(D, H, K):
    """A row's output depends on its own prompt and completion only: not on the other rows, nor on how far its
    prompt is left-padded (the padding is skipped, so its keys fall into the same blocks of four)."""
    gen = torch.Generator().manual_seed(1)
    G, P, T, n, pad = 3, 11, 9, 2, 4
    pk, pv = torch.randn(2, G, K, P, D, generator=gen)
    bias = torch.zeros(G, P)
    bias[1, :pad] = float("-inf")  # prompt 1 is left-padded by 4 columns (its keys there: garbage, never read)
    slots = torch.tensor([0, 2, 3, 5])  # cache rows of prompts 0, 1, 1, 2
    b = len(slots)
    qkv = torch.randn(b, H + 2 * K, D, generator=gen)
    cos, sin = torch.rand(2, b, D, generator=gen)
    ck, cv = torch.randn(2, b, K, T, D, generator=gen)
    scratch = torch.empty(P + T + 4)
    for col in range(T):
        batch_ck, batch_cv = ck.clone(), cv.clone()
        out = ckernel.attention(qkv, cos, sin, pk, pv, bias[slots // n], slots, n, batch_ck, batch_cv, col, 0.3,
                                scratch)  # fmt: skip
        r = 2  # row 2: prompt 1, alone and without its padding
        alone_ck, alone_cv = ck[r : r + 1].clone(), cv[r : r + 1].clone()
        alone = ckernel.attention(qkv[r : r + 1], cos[r : r + 1], sin[r : r + 1], pk[1:2, :, pad:].contiguous(),
                                  pv[1:2, :, pad:].contiguous(), torch.zeros(1, P - pad), torch.tensor([1]), n,
                                  alone_ck, alone_cv, col, 0.3, scratch)  # fmt: skip
        assert torch.equal(out[r], alone[0])
        assert torch.equal(batch_ck[r], alone_ck[0]) and torch.equal(batch_cv[r], alone_cv[0])


@needs_cc
def test_c_sampler_draws_as_the_torch_sampler_and_repeats_itself(model):
    m, tokenizer = model
    ids, mask = _prompts(tokenizer)
    out = {}
    for kernel in ("torch", "c", "c"):
        torch.manual_seed(3)
        out.setdefault(kernel, []).append(
            sampling.sample_rows(
                m, ids, mask, 8, 16, 0.9, tokenizer.eos_token_id, with_entropy=True, with_log_probs=True, kernel=kernel
            )  # fmt: skip
        )
    first, again = out["c"]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))  # same seed, same bits
    (tokens_t, resp_t, ent_t, lp_t), (tokens_c, resp_c, ent_c, lp_c) = out["torch"][0], first
    same = (tokens_t == tokens_c).all(1) & (resp_t == resp_c).all(1)
    assert same.float().mean() > 0.9  # rounding flips a draw only rarely
    assert (lp_t - lp_c)[same].abs().max() < 1e-5 and (ent_t - ent_c)[same].abs().max() < 1e-5


@needs_cc
def test_kernel_refuses_bad_input(model):
    m, tokenizer = model
    fast = FastLlama.for_model(m)
    ids, mask = _prompts(tokenizer)
    with pytest.raises(ValueError, match="sampler_kernel: must be one of torch, c"):
        sampling.sample_rows(m, ids, mask, 2, 4, 1.0, tokenizer.eos_token_id, kernel="cuda")
    with pytest.raises(ValueError, match="sampler_kernel: must be one of torch, c, got 'C'"):
        TrainConfig(model="m", data="d", out="o", sampler_kernel="C").validate()
    m.__dict__["_bandpo_fastllama"] = False  # a model FastLlama does not cover
    try:
        with pytest.raises(ValueError, match="needs a model the suite's FastLlama covers"):
            sampling.sample_rows(m, ids, mask, 2, 4, 1.0, tokenizer.eos_token_id, kernel="c")
    finally:
        m.__dict__.pop("_bandpo_fastllama")
    G, P = ids.shape
    H, D = fast.n_heads, fast.head_dim
    qkv, rope = torch.randn(2, 3, H, D), torch.randn(2, D)
    pk, bias, slots = torch.randn(G, H, P, D), torch.zeros(2, P), torch.tensor([0, 1])
    cache, scratch = torch.randn(2, H, 5, D), torch.empty(P + 9)
    good = dict(qkv=qkv, cos=rope, sin=rope, prompt_k=pk, prompt_v=pk, prompt_bias=bias, slots=slots, n=2,
                cache_k=cache, cache_v=cache.clone(), col=1, scale=0.5, scratch=scratch)  # fmt: skip
    assert ckernel.attention(**good).shape == (2, H, D)
    bad = [
        ({"qkv": qkv.double()}, "contiguous float32"),
        ({"cache_k": torch.randn(2, H, D, 5).transpose(2, 3)}, "contiguous float32"),
        ({"slots": slots.int()}, "int64"),
        ({"col": 5}, "column 5 of 5"),
        ({"slots": torch.tensor([0, 2 * G])}, "beyond"),
        ({"scratch": torch.empty(3)}, "do not fit"),
        ({"qkv": torch.randn(2, 2, H, D)}, "bad shapes"),
        ({"qkv": torch.randn(2, 3 * H + 1, D)}, "bad shapes"),  # (b, H' + 2K, D): K = H heads do not divide H + 1
        ({"cache_k": cache[0]}, "must be 4-d"),
    ]
    for change, message in bad:
        with pytest.raises(ValueError, match=message):
            ckernel.attention(**{**good, **change})


def test_a_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("BANDPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    ckernel._function.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"sampler_kernel: c .*no-such-cc"):
            ckernel.check("c")
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        monkeypatch.delenv("CC")
        with pytest.raises(RuntimeError, match="needs a C compiler .* or use sampler_kernel: torch"):
            ckernel.check("c")
        assert not list((tmp_path / "cache").glob("*")), "a failed build leaves nothing behind"
    finally:
        ckernel._function.cache_clear()
    assert numerics.library_path("x", "a", ("-O2",)) != numerics.library_path("x", "a", ("-O3",))


@needs_cc
@pytest.mark.parametrize("H, K, D", [(2, 2, 16), (9, 3, 64)], ids=["mha", "smollm2"])
def test_the_bits_do_not_depend_on_the_code_the_compiler_emits(tmp_path, monkeypatch, H, K, D):
    """The library is built for the x86-64 baseline; built for AVX2 machines (``-march=x86-64-v3``, FMA units
    included) it must give the same bits: no contraction, no reassociation, no libm (an AVX2 CPU runs the test).
    Also in SmolLM2-135M's shapes: 9 query heads on 3 key / value heads of 64."""
    import ctypes

    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("no AVX2 on this CPU")
    baseline = ckernel._function()
    monkeypatch.setenv("BANDPO_CACHE_DIR", str(tmp_path))
    flags = tuple("-march=x86-64-v3" if f == "-march=x86-64" else f for f in ckernel.FLAGS)
    path = numerics.build_library("libbandpo-decode-v3", ckernel.SOURCE, flags, "test", "skip")
    alt = ctypes.CDLL(str(path)).bandpo_decode_attention
    alt.argtypes, alt.restype = baseline.argtypes, ctypes.c_int
    gen = torch.Generator().manual_seed(2)
    G, P, T, n = 3, 13, 11, 2
    pk, pv = torch.randn(2, G, K, P, D, generator=gen)
    bias = torch.zeros(G * n, P)
    bias[2:4, :5] = float("-inf")
    qkv = torch.randn(G * n, H + 2 * K, D, generator=gen)
    cos, sin = torch.rand(2, G * n, D, generator=gen)
    cache = torch.randn(2, G * n, K, T, D, generator=gen)
    outs = []
    for f in (baseline, alt):
        monkeypatch.setattr(ckernel, "_function", lambda f=f: f)
        ck, cv = cache.clone()
        outs.append([ckernel.attention(qkv, cos, sin, pk, pv, bias, torch.arange(G * n), n, ck, cv, col, 0.25,
                                       torch.empty(P + T + 4)) for col in range(T)])  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(*outs, strict=True))
