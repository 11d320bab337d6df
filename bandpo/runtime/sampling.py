"""KV-cached ancestral sampling from a causal LM: the one sampler of the suite, used by the trainer's rollouts
(`bandpo.train.loop`), the tiny models' sampled accuracy (`bandpo.models.tiny.sample_completions`), the scoring
(`bandpo.score`) and verl's CPU rollout (`bandpo.verl.hf_rollout`); and the trainer's log-probs of sampled
completions (`completion_log_probs_shared`), under the same softmax(logits / temperature).

Plain sampling from softmax(logits / temperature) (no top-k, no top-p). Each prompt is pre-filled once and its KV
cache repeated for its ``n`` rows; rows that have emitted EOS stop, and once they are ``COMPACT_FRAC`` of the rows
still in the cache they are dropped from it, so late steps run only the rows still generating. Draws come from
torch's global generator: seed it (``torch.manual_seed``) for a reproducible sample. Each token is drawn by `draw`:
``torch.multinomial`` for a small vocabulary (the tiny models), the inverse of the distribution function for a large
one (a real LM), which costs one uniform number per row instead of one exponential per vocabulary entry.

Common random numbers (``keys``, issue #67): instead of the generator's next numbers, each row's token at position t
is drawn by the inverse distribution function from one uniform number that is a function of the row's key and t
alone (`keyed_uniforms`: SplitMix64's mixing function of ``key + (t + 1) * 0x9E3779B97F4A7C15``, the top 53 bits),
whatever the other rows do. A row's key is a hash of (seed, step, prompt, sample) (`draw_keys`), so two runs that
share a seed (the two arms of a paired comparison) draw the same number wherever they sample the same position, and
their samples stay together as long as their policies agree. Exact (a uniform number through the inverse
distribution function) and integer arithmetic: the same bits on any CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from bandpo.runtime import ckernel
from bandpo.runtime.fastlm import FastLlama, gather_rows, prompt_bias

__all__ = ["COMPACT_FRAC", "MULTINOMIAL_MAX_VOCAB", "completion_log_probs_shared", "draw", "draw_keys",
           "keyed_uniforms", "positions", "sample_rows", "tempered"]  # fmt: skip

COMPACT_FRAC = 0.25
"""A rollout drops its finished rows from the batch and the KV cache once they are this fraction of its rows."""

MULTINOMIAL_MAX_VOCAB = 4096
"""`draw` uses ``torch.multinomial`` up to this vocabulary size (the tiny models' draws, unchanged), the inverse
distribution function above it."""

DRAW_BLOCK = 256  # `draw`'s block of vocabulary entries (a large vocabulary)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment: 2^64 / the golden ratio
_MASK64 = (1 << 64) - 1


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's mixing function on uint64 numbers (wrapping arithmetic, the same on every machine)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _word(values) -> np.ndarray:
    """Integers (negative ones too) as uint64 words, two's complement."""
    return np.asarray([int(v) & _MASK64 for v in np.atleast_1d(values)], dtype=np.uint64)


def draw_keys(seed: int, step: int, prompts: Sequence[int], n: int) -> np.ndarray:
    """The keys of the ``len(prompts) * n`` rows of a rollout (row r: prompt ``prompts[r // n]``, sample r % n): a
    hash of (seed, step, prompt, sample), the same in every run of that seed (`keyed_uniforms`)."""
    with np.errstate(over="ignore"):
        h = _mix(_mix(_word(seed) + _GOLDEN) ^ _word(step))  # (1,)
        h = _mix(h ^ (_word(prompts) * _GOLDEN))  # (G,)
        return _mix(np.repeat(h, n) ^ (np.tile(np.arange(n, dtype=np.uint64), len(prompts)) + _GOLDEN))


def keyed_uniforms(keys: np.ndarray, t: int) -> torch.Tensor:
    """One uniform number in [0, 1) per key for position ``t``: the top 53 bits of SplitMix64's output for
    ``key + (t + 1) * golden``, as float64 (B,)."""
    with np.errstate(over="ignore"):
        z = _mix(keys + np.uint64(t + 1) * _GOLDEN)
    return torch.from_numpy((z >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def draw(probs: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of ``probs`` (B, V): non-negative, each row with a positive sum (a softmax), drawn with
    probability ``probs / probs.sum(-1)``; returns (B,) int64. ``u``: (B,) uniform numbers in [0, 1), one per row
    (common random numbers, `keyed_uniforms`), drawn by the inverse distribution function below whatever the
    vocabulary's size; None: from torch's global generator, as follows.

    Up to `MULTINOMIAL_MAX_VOCAB` entries: ``torch.multinomial(probs, 1)``. It draws one exponential number per
    vocabulary entry (``argmax(p / E)``), which for a real LM's 49,152 tokens and 128 rows costs about ten times the
    rest of a sampled token's softmax; above that size, one uniform number u per row and the inverse distribution
    function: the entries in blocks of `DRAW_BLOCK`, the block whose cumulative sum (float64 over the blocks'
    float32 sums) first exceeds u times the total, then the entry within it whose cumulative sum (float64) first
    exceeds the rest. An entry of probability 0 is never drawn; the blocks' float32 sums shift an entry's
    probability by about 1e-7 of its block's at most."""
    B, V = probs.shape
    if u is None and V <= MULTINOMIAL_MAX_VOCAB:
        return torch.multinomial(probs, 1).squeeze(1)
    nb = -(-V // DRAW_BLOCK)
    if nb * DRAW_BLOCK != V:
        probs = torch.nn.functional.pad(probs, (0, nb * DRAW_BLOCK - V))
    blocks = probs.view(B, nb, DRAW_BLOCK)
    cdf = blocks.sum(-1).double().cumsum(-1)  # (B, nb)
    if u is None:
        u = torch.rand(B, 1, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    else:
        u = u.to(device=probs.device, dtype=torch.float64).view(B, 1) * cdf[:, -1:]
    blk = torch.searchsorted(cdf, u, right=True).clamp_(max=nb - 1)  # the first block whose cumulative sum > u
    below = torch.where(blk > 0, cdf.gather(1, (blk - 1).clamp(min=0)), 0.0)
    inner = blocks.gather(1, blk.unsqueeze(2).expand(B, 1, DRAW_BLOCK)).squeeze(1)  # (B, DRAW_BLOCK)
    j = torch.searchsorted(inner.double().cumsum(-1), u - below, right=True).squeeze(1)
    # the rest beyond the block's float64 total (its float32 sum rounded up): the block's last entry with p > 0
    last = torch.where(inner > 0, torch.arange(DRAW_BLOCK, device=probs.device), -1).amax(-1)
    return blk.squeeze(1) * DRAW_BLOCK + torch.minimum(j, last)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded layout: 0 at each row's first real token."""
    return (mask.cumsum(1) - 1).clamp(min=0)


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature``: the logits of the sampling distribution; at 1.0 the logits themselves (no division:
    no operation, and no new tensor, where it would change nothing)."""
    return logits if temperature == 1.0 else logits / temperature


@torch.no_grad()
def sample_rows(model, prompt_ids, prompt_mask, n: int, max_new_tokens: int, temperature: float, eos: int,
                with_entropy: bool = False, with_log_probs: bool = False, kernel: str = "torch",
                keys: np.ndarray | None = None):  # fmt: skip
    """``n`` completions per prompt of the left-padded ``prompt_ids`` / ``prompt_mask`` (G, P); row r of the result
    continues prompt r // n.

    Returns the tokens (G n, T) with T the longest completion (pad 0 after EOS), the mask of valid tokens (up to
    and including EOS) and, with ``with_entropy``, the entropy (nats) of the sampling distribution
    softmax(logits / temperature) at each valid token (zero on padding), else None. With ``with_log_probs`` a
    fourth item: the log-probability of each sampled token under that distribution (zero on padding): what the
    trainer's old log-probs (`completion_log_probs_shared` at the same temperature) recompute.

    One loop (`_sample_loop`) for every model; what differs is how the next token's logits are computed and how
    finished rows leave the KV cache: `_FastSteps` on `bandpo.runtime.fastlm.FastLlama` (one preallocated cache),
    `_HFSteps` through the model's own forward pass and cache classes.

    ``kernel``: how `FastLlama` computes each token's attention, ``torch`` (PyTorch operations) or ``c`` (one C
    call per layer, `bandpo.runtime.ckernel`: equal up to float rounding, so other draws; CPU, x86-64, a model
    `FastLlama` covers; otherwise a ValueError).

    ``keys``: one uint64 key per row (G n,), `draw_keys`: the rows' common random numbers (the module's docstring);
    None: torch's global generator."""
    ckernel.check(kernel)
    if keys is not None and len(keys) != prompt_ids.shape[0] * n:
        raise ValueError(f"keys: one per row, {prompt_ids.shape[0] * n}, got {len(keys)}")
    fast = FastLlama.for_model(model)
    if kernel == "c" and (fast is None or prompt_ids.device.type != "cpu"):
        raise ValueError("sampler_kernel: c needs a model the suite's FastLlama covers, on the CPU; use torch")
    steps = (
        _FastSteps(fast, prompt_ids, prompt_mask, n, max_new_tokens, kernel == "c")
        if fast is not None
        else _HFSteps(model, prompt_ids, prompt_mask, n, max_new_tokens)
    )
    return _sample_loop(steps, prompt_ids.shape[0] * n, max_new_tokens, temperature, eos, with_entropy, with_log_probs,
                        keys)  # fmt: skip


class _HFSteps:
    """The model's own forward pass: a prefill of the prompts, its cache repeated for each prompt's ``n`` rows."""

    def __init__(self, model, prompt_ids, prompt_mask, n, max_new_tokens) -> None:
        G, P = prompt_ids.shape
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions(prompt_mask),
                    use_cache=True, logits_to_keep=1)  # fmt: skip
        self.model, self.P, self.cache = model, P, out.past_key_values
        self.cache.batch_repeat_interleave(n)
        self.first = out.logits[:, -1].float().repeat_interleave(n, 0)  # (B, V): the distribution of token 0
        self.attn = torch.cat([prompt_mask.repeat_interleave(n, 0), prompt_mask.new_ones(G * n, max_new_tokens)], 1)
        self.row_positions = prompt_mask.sum(1).repeat_interleave(n)  # position of completion token 0

    def drop(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)

    def next(self, tok: torch.Tensor, t: int, rows: torch.Tensor) -> torch.Tensor:
        position_ids = (self.row_positions[rows] + t).unsqueeze(1)
        out = self.model(input_ids=tok.unsqueeze(1), attention_mask=self.attn[rows, : self.P + t + 1],
                         position_ids=position_ids, past_key_values=self.cache, use_cache=True)  # fmt: skip
        return out.logits[:, -1].float()


class _FastSteps:
    """`bandpo.runtime.fastlm.FastLlama`: the prompt's KV cache computed once, the completions' in one preallocated
    tensor from which finished rows are dropped."""

    def __init__(self, fast: FastLlama, prompt_ids, prompt_mask, n, max_new_tokens, c_kernel: bool = False) -> None:
        G, P = prompt_ids.shape
        self.fast, self.n, self.weights = fast, n, fast.weights()
        logits, self.prompt_kv = fast.prefill(prompt_ids, prompt_mask, self.weights)
        self.first = logits.float().repeat_interleave(n, 0)  # (B, V): the distribution of completion token 0
        L = self.prompt_kv.shape[0]
        # uninitialised: decode step t writes column t of every row still in the cache before reading columns <= t
        self.comp_kv = self.prompt_kv.new_empty(L, 2, G * n, fast.n_kv, max_new_tokens, fast.head_dim)
        p_bias = torch.zeros(G, 1, P, device=prompt_ids.device).masked_fill_(prompt_mask.unsqueeze(1) == 0,
                                                                              float("-inf"))  # fmt: skip
        self.p_bias = p_bias.repeat_interleave(n, 0)  # (B, 1, P): the prompt's padding, per cache row
        self.row_pos = prompt_mask.sum(1).repeat_interleave(n)  # position of completion token 0
        self.scratch = torch.empty(P + max_new_tokens + 4) if c_kernel else None  # `ckernel.attention`'s

    def drop(self, keep: torch.Tensor) -> None:
        self.comp_kv = self.comp_kv.index_select(2, keep)
        self.p_bias, self.row_pos = self.p_bias[keep], self.row_pos[keep]

    def next(self, tok: torch.Tensor, t: int, rows: torch.Tensor) -> torch.Tensor:
        return self.fast.decode(tok, self.row_pos + t, self.prompt_kv, self.p_bias, rows, self.n, self.comp_kv, t,
                                self.weights, self.scratch)  # fmt: skip


def _sample_loop(steps, B: int, max_new_tokens: int, temperature: float, eos: int, with_entropy: bool,
                 with_log_probs: bool, keys: np.ndarray | None = None):  # fmt: skip
    """The sampler's loop (see `sample_rows`): draw a token for every row still in the cache, record its entropy
    and log-prob, stop rows at EOS, drop finished rows from the cache once they are `COMPACT_FRAC` of it, then ask
    ``steps`` for the next logits."""
    logits = steps.first
    device = logits.device
    tokens = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    entropy = torch.zeros(B, max_new_tokens, device=device) if with_entropy else None
    sampled_lp = torch.zeros(B, max_new_tokens, device=device) if with_log_probs else None
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)  # the batch row of each cache row
    live = torch.ones(B, dtype=torch.bool, device=device)  # cache rows still generating
    for t in range(max_new_tokens):
        scaled = tempered(logits, temperature)
        probs = torch.softmax(scaled, -1)
        tok = draw(probs, None if keys is None else keyed_uniforms(keys[rows.cpu().numpy()], t))
        tokens[rows, t] = tok  # a finished row still in the cache writes after its EOS: masked, then zeroed below
        if entropy is not None or sampled_lp is not None:
            log_probs = torch.log_softmax(scaled, -1)
            if entropy is not None:
                entropy[rows, t] = -(probs * log_probs).sum(-1)
            if sampled_lp is not None:
                sampled_lp[rows, t] = log_probs.gather(1, tok.unsqueeze(1)).squeeze(1)
        done = live & (tok == eos)
        if bool(done.any()):
            lengths[rows[done]] = t + 1
            live = live & ~done
            n_live = int(live.sum())
            if n_live == 0:
                break
            if live.numel() - n_live >= COMPACT_FRAC * live.numel():
                keep = live.nonzero().squeeze(1)
                steps.drop(keep)
                rows, tok, live = rows[keep], tok[keep], live[keep]
        if t + 1 == max_new_tokens:
            break
        logits = steps.next(tok, t, rows)
    T = int(lengths.max())
    response_mask = torch.arange(T, device=device).unsqueeze(0) < lengths.unsqueeze(1)
    tokens = tokens[:, :T] * response_mask
    entropy = entropy[:, :T] * response_mask if entropy is not None else None
    if sampled_lp is None:
        return tokens, response_mask, entropy
    return tokens, response_mask, entropy, sampled_lp[:, :T] * response_mask


def completion_log_probs_shared(model, batch, idx: torch.Tensor, group: int, with_entropy: bool = False,
                                temperature: float = 1.0):  # fmt: skip
    """Log-probs of the completion tokens of rows ``idx`` of ``batch`` under ``model`` (each (len(idx), T), zero on
    padding) and, with ``with_entropy``, the token entropy of its distribution, computed with each distinct prompt
    among those rows run once and its KV cache shared by its rows: one forward pass over the prompts, then one over
    the completions. Prompt columns that are padding in every prompt of ``idx`` and
    completion columns past the longest completion of ``idx`` are not computed. Differentiable (the gradient
    flows back into the shared prompt pass); equal to a full forward pass of every prompt + completion row up to float
    rounding. ``temperature``: log-probs and entropy of softmax(logits / temperature), the distribution the rollouts
    sampled from (`sample_rows`; verl's actor divides its logits by the rollout temperature the same way), so that
    the ratio of the first, on-policy update is 1 at any temperature. ``batch``: a `bandpo.train.loop.Batch`."""
    fast = FastLlama.for_model(model)
    if fast is not None:
        return _completion_log_probs_fast(fast, batch, idx, group, with_entropy, temperature)
    T = batch.response_mask.shape[1]
    groups = torch.div(idx, group, rounding_mode="floor")
    uniq, inverse = torch.unique(groups, return_inverse=True)
    p_mask = batch.prompt_mask[uniq]
    first = int((p_mask.sum(0) > 0).nonzero()[0])  # leading columns that are padding in every prompt here
    p_ids, p_mask = batch.prompt_ids[uniq, first:], p_mask[:, first:]
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=positions(p_mask), use_cache=True,
                logits_to_keep=1)  # fmt: skip
    cache = out.past_key_values
    cache.batch_select_indices(inverse)  # differentiable gather: each row gets its prompt's keys and values
    logits = out.logits[:, -1:][inverse]  # (n, 1, V): predicts completion token 0
    resp = batch.response_mask[idx]
    t_max = max(int(resp.sum(1).max()), 1)
    comp = batch.input_ids[idx, batch.prompt_len : batch.prompt_len + t_max]
    if t_max > 1:
        attn = torch.cat([p_mask[inverse], resp[:, : t_max - 1].long()], 1)
        pos = p_mask.sum(1)[inverse].unsqueeze(1) + torch.arange(t_max - 1, device=idx.device).unsqueeze(0)
        rest = model(input_ids=comp[:, :-1], attention_mask=attn, position_ids=pos, past_key_values=cache,
                     use_cache=True).logits  # fmt: skip
        logits = torch.cat([logits, rest], 1)
    log_probs = torch.log_softmax(tempered(logits.float(), temperature), -1)
    token_log_prob = log_probs.gather(-1, comp.unsqueeze(-1)).squeeze(-1) * resp[:, :t_max]
    token_log_prob = torch.nn.functional.pad(token_log_prob, (0, T - t_max))
    if not with_entropy:
        return token_log_prob, None
    entropy = -(log_probs.exp() * log_probs).sum(-1) * resp[:, :t_max]
    return token_log_prob, torch.nn.functional.pad(entropy, (0, T - t_max))


def _completion_log_probs_fast(fast: FastLlama, batch, idx, group, with_entropy, temperature):
    """`completion_log_probs_shared` on `bandpo.runtime.fastlm.FastLlama`: the same two passes, each over its real
    tokens only (the prompts' padding and the completions' columns past EOS are left out of the per-token
    products)."""
    T = batch.response_mask.shape[1]
    groups = torch.div(idx, group, rounding_mode="floor")
    uniq, inverse = torch.unique(groups, return_inverse=True)
    p_mask = batch.prompt_mask[uniq]
    first = int((p_mask.sum(0) > 0).nonzero()[0])  # leading columns that are padding in every prompt here
    p_ids, p_mask = batch.prompt_ids[uniq, first:], p_mask[:, first:]
    weights = fast.weights()
    p_sel = p_mask.reshape(-1).nonzero().squeeze(1)
    logits0, kvs = fast.forward(p_ids, positions(p_mask), prompt_bias(p_mask), weights=weights, want_kv=True,
                                last_only=True, sel=p_sel)  # fmt: skip
    resp = batch.response_mask[idx]
    n = len(idx)
    t_max = max(int(resp.sum(1).max()), 1)
    comp = batch.input_ids[idx, batch.prompt_len : batch.prompt_len + t_max]
    logits = logits0[inverse]  # (n, V): predicts completion token 0
    targets = comp[:, 0]
    where = torch.arange(n, device=idx.device) * t_max  # flat (n, t_max) index of each logits row's token
    if t_max > 1:
        # completion column j predicts token j + 1: needed where that token is real (a prefix of each row); the
        # columns attend to their prompt's real tokens and causally to each other
        L = t_max - 1
        need = resp[:, 1:t_max]
        sel = need.reshape(-1).nonzero().squeeze(1)
        keys = torch.cat(
            [
                p_mask[inverse].bool().unsqueeze(1).expand(-1, L, -1),
                torch.ones(L, L, dtype=torch.bool, device=idx.device).tril().expand(n, -1, -1),
            ],
            2,
        )
        bias = torch.zeros(keys.shape, device=idx.device).masked_fill_(~keys, float("-inf")).unsqueeze(1)
        pos = p_mask.sum(1)[inverse].unsqueeze(1) + torch.arange(L, device=idx.device).unsqueeze(0)
        past = [(gather_rows(k, inverse), gather_rows(v, inverse)) for k, v in kvs]
        rest = fast.forward(comp[:, :-1], pos, bias, past=past, weights=weights, sel=sel)
        logits = torch.cat([logits, rest])
        targets = torch.cat([targets, comp[:, 1:].reshape(-1)[sel]])
        where = torch.cat([where, sel + torch.div(sel, L, rounding_mode="floor") + 1])  # (r, j) -> r t_max + j + 1
    log_probs = torch.log_softmax(tempered(logits.float(), temperature), -1)  # (tokens, V)
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    token_log_prob = picked.new_zeros(n * t_max).index_copy(0, where, picked).view(n, t_max) * resp[:, :t_max]
    token_log_prob = torch.nn.functional.pad(token_log_prob, (0, T - t_max))
    if not with_entropy:
        return token_log_prob, None
    ent = -(log_probs.exp() * log_probs).sum(-1)
    entropy = ent.new_zeros(n * t_max).index_copy(0, where, ent).view(n, t_max) * resp[:, :t_max]
    return token_log_prob, torch.nn.functional.pad(entropy, (0, T - t_max))
