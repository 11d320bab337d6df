"""KV-cached ancestral sampling from a causal LM: the one sampler of the suite, used by the trainer's rollouts
(`bandpo.train`) and by the tiny models' sampled accuracy (`bandpo.models.sample_completions`).

Plain sampling from softmax(logits / temperature) (no top-k, no top-p). Each prompt is pre-filled once and its KV
cache repeated for its ``n`` rows; rows that have emitted EOS stop, and once they are ``COMPACT_FRAC`` of the rows
still in the cache they are dropped from it, so late steps run only the rows still generating. Draws come from
torch's global generator: seed it (``torch.manual_seed``) for a reproducible sample.
"""

from __future__ import annotations

import torch

__all__ = ["COMPACT_FRAC", "positions", "sample_rows"]

COMPACT_FRAC = 0.25
"""A rollout drops its finished rows from the batch and the KV cache once they are this fraction of its rows."""


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded layout: 0 at each row's first real token."""
    return (mask.cumsum(1) - 1).clamp(min=0)


@torch.no_grad()
def sample_rows(model, prompt_ids, prompt_mask, n: int, max_new_tokens: int, temperature: float, eos: int,
                with_entropy: bool = False):  # fmt: skip
    """``n`` completions per prompt of the left-padded ``prompt_ids`` / ``prompt_mask`` (G, P); row r of the result
    continues prompt r // n.

    Returns the tokens (G n, T) with T the longest completion (pad 0 after EOS), the mask of valid tokens (up to
    and including EOS) and, with ``with_entropy``, the entropy (nats) of the sampling distribution
    softmax(logits / temperature) at each valid token (zero on padding), else None."""
    G, P = prompt_ids.shape
    B, device = G * n, prompt_ids.device
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions(prompt_mask),
                use_cache=True, logits_to_keep=1)  # fmt: skip
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].float().repeat_interleave(n, 0)  # (B, V): the distribution of completion token 0
    tokens = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    entropy = torch.zeros(B, max_new_tokens, device=device) if with_entropy else None
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)  # the batch row of each cache row
    live = torch.ones(B, dtype=torch.bool, device=device)  # cache rows still generating
    attn = torch.cat([prompt_mask.repeat_interleave(n, 0), prompt_mask.new_ones(B, max_new_tokens)], 1)
    row_positions = prompt_mask.sum(1).repeat_interleave(n)  # position of completion token 0
    for t in range(max_new_tokens):
        probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, -1)
        tok = torch.multinomial(probs, 1).squeeze(1)
        tokens[rows, t] = tok  # a finished row still in the cache writes after its EOS: masked, then zeroed below
        if entropy is not None:
            log_probs = torch.log_softmax(logits if temperature == 1.0 else logits / temperature, -1)
            entropy[rows, t] = -(probs * log_probs).sum(-1)
        done = live & (tok == eos)
        if bool(done.any()):
            lengths[rows[done]] = t + 1
            live = live & ~done
            n_live = int(live.sum())
            if n_live == 0:
                break
            if live.numel() - n_live >= COMPACT_FRAC * live.numel():
                keep = live.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                rows, tok, live = rows[keep], tok[keep], live[keep]
        if t + 1 == max_new_tokens:
            break
        position_ids = (row_positions[rows] + t).unsqueeze(1)
        out = model(input_ids=tok.unsqueeze(1), attention_mask=attn[rows, : P + t + 1], position_ids=position_ids,
                    past_key_values=cache, use_cache=True)  # fmt: skip
        logits = out.logits[:, -1].float()
    T = int(lengths.max())
    response_mask = torch.arange(T, device=device).unsqueeze(0) < lengths.unsqueeze(1)
    tokens = tokens[:, :T] * response_mask
    return tokens, response_mask, (entropy[:, :T] * response_mask if entropy is not None else None)
