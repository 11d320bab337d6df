"""A lean functional forward pass of a Hugging Face ``LlamaForCausalLM``, for the trainer's hot loops.

The tiny models of the embedded profile (0.2M / 0.6M parameters) spend their time in per-operation overhead
(Python, module calls, mask building, cache classes), not in arithmetic. `FastLlama` computes the same function
as the HF module with far fewer operations, on the model's own parameters (no copies: gradients reach them):

- the query, key and value projections are one matrix product (the three weights concatenated per call), as are
  the gate and up projections of the MLP;
- rotary embeddings read a cos / sin table precomputed once by the model's own rotary module, and rotate queries
  and keys together (``x * cos + roll(x, D/2) * sin_signed``, which is ``rotate_half``);
- attention is ``scaled_dot_product_attention`` with one additive mask per call;
- the sampler's KV cache is ONE preallocated tensor (layers, 2, rows, heads, length, head_dim) written in place per
  token; dropping finished rows is one ``index_select`` for all layers.

The results equal the HF forward pass up to float rounding (different but equivalent operation order; checked to
1e-5 in tests/test_fastlm.py), not bit for bit. `FastLlama.for_model` returns ``None`` for a model it does not
cover (another architecture, biases, a non-default rotary embedding, attention or logit soft-capping, any hook on a
module), and the callers then use the HF module as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["FastLlama"]

_ATTR = "_bandpo_fastllama"


def _has_hooks(model) -> bool:
    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or getattr(m, "_backward_pre_hooks", None):
            return True
    from torch.nn.modules import module as nn_module

    return bool(nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks)


class FastLlama:
    """Functional forward of one ``LlamaForCausalLM`` (see the module docstring)."""

    def __init__(self, model) -> None:
        cfg = model.config
        self.model = model
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.hidden = cfg.hidden_size
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = float(cfg.rms_norm_eps)
        self.max_pos = int(cfg.max_position_embeddings)
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.head = model.lm_head.weight
        self.final_norm = inner.norm.weight
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(
                (layer.input_layernorm.weight, a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight,
                 layer.post_attention_layernorm.weight, m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight)
            )  # fmt: skip
        self._table_device = None
        self._cos = self._sin = None

    # ------------------------------------------------------------------------------------------------------------
    @classmethod
    def for_model(cls, model) -> FastLlama | None:
        """The model's `FastLlama` (made once and kept on the model), or None where it does not apply."""
        fast = model.__dict__.get(_ATTR)
        if fast is not None:
            return fast if fast is not False and not _has_hooks(model) else None
        ok = cls.supports(model)
        model.__dict__[_ATTR] = cls(model) if ok else False
        return model.__dict__[_ATTR] or None

    @staticmethod
    def supports(model) -> bool:
        try:
            from transformers import LlamaForCausalLM
        except ImportError:  # pragma: no cover
            return False
        if type(model) is not LlamaForCausalLM or _has_hooks(model):
            return False
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            return False
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
            return False
        if getattr(cfg, "hidden_act", "silu") != "silu" or cfg.num_key_value_heads != cfg.num_attention_heads:
            return False
        if getattr(cfg, "pretraining_tp", 1) != 1 or getattr(cfg, "attention_dropout", 0.0):
            return False
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if head_dim * cfg.num_attention_heads != cfg.hidden_size or head_dim % 2:
            return False
        if any(p.dtype != torch.float32 for p in model.parameters()):
            return False
        return True

    def _tables(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (with rotate_half's sign folded in) per position, from the model's own rotary module."""
        if self._table_device != device:
            rotary = self.model.model.rotary_emb
            pos = torch.arange(self.max_pos, device=device).unsqueeze(0)
            with torch.no_grad():
                probe = torch.zeros(1, device=device, dtype=torch.float32)
                cos, sin = rotary(probe, pos)
            cos, sin = cos[0].float(), sin[0].float()
            half = self.head_dim // 2
            sin = torch.cat([-sin[:, :half], sin[:, half:]], -1)  # rotate_half(x) * sin == roll(x, half) * this
            self._cos, self._sin, self._table_device = cos.contiguous(), sin.contiguous(), device
        return self._cos, self._sin

    def weights(self) -> list[tuple[torch.Tensor, ...]]:
        """Per layer (norm 1, fused q|k|v, o, norm 2, fused gate|up, down); differentiable concatenations."""
        return [
            (n1, torch.cat([q, k, v]), o, n2, torch.cat([g, u]), d) for n1, q, k, v, o, n2, g, u, d in self.layers
        ]

    # ------------------------------------------------------------------------------------------------------------
    def _rope(self, qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return qk * cos + qk.roll(self.head_dim // 2, -1) * sin

    def _mlp(self, x, n2, gu, d):
        h = F.rms_norm(x, (self.hidden,), n2, self.eps)
        g, u = F.linear(h, gu).chunk(2, -1)
        return x + F.linear(F.silu(g) * u, d)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.rms_norm(x, (self.hidden,), self.final_norm, self.eps), self.head)

    def forward(self, ids, pos, bias, past=None, weights=None, want_kv=False, last_only=False, sel=None):
        """Logits of ``ids`` (B, L) at positions ``pos`` (B, L) with the additive attention mask ``bias``
        (B, 1, L, Lpast + L); ``past``: per layer (k, v) of Lpast earlier tokens (B, H, Lpast, D), attended first.
        ``want_kv``: also return this call's per-layer (k, v). ``last_only``: logits of the last column only.

        ``sel``: the flat indices (into B x L, ascending) of the positions that matter; the others (padding) are
        left out of every per-token product (norms, projections, MLP: most of the arithmetic) and only take part,
        as zeros hidden by ``bias``, in attention. Then the logits are those of the ``sel`` positions, (len(sel),
        V), or with ``last_only`` of the last ``sel`` position of each row (which must be the row's last column).
        A position outside ``sel`` must not be attended to by one inside it."""
        W = self.weights() if weights is None else weights
        B, L = ids.shape
        H, D = self.n_heads, self.head_dim
        cos_t, sin_t = self._tables(ids.device)
        cos, sin = cos_t[pos].unsqueeze(1), sin_t[pos].unsqueeze(1)  # (B, 1, L, D)
        flat = ids.reshape(-1) if sel is None else ids.reshape(-1)[sel]
        x = F.embedding(flat, self.embed)  # (N, hidden): N = B L or len(sel)
        kvs = []
        for i, (n1, qkv_w, o, n2, gu, d) in enumerate(W):
            h = F.rms_norm(x, (self.hidden,), n1, self.eps)
            qkv = F.linear(h, qkv_w)
            if sel is not None:
                qkv = qkv.new_zeros(B * L, 3 * H * D).index_copy(0, sel, qkv)
            qkv = qkv.view(B, L, 3, H, D).permute(2, 0, 3, 1, 4)  # (3, B, H, L, D)
            qk = self._rope(qkv[:2], cos, sin)
            q, k, v = qk[0], qk[1], qkv[2]
            if want_kv:
                kvs.append((k, v))
            if past is not None:
                k = torch.cat([past[i][0], k], 2)
                v = torch.cat([past[i][1], v], 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(B * L, H * D)
            if sel is not None:
                a = a.index_select(0, sel)
            x = x + F.linear(a, o)
            x = self._mlp(x, n2, gu, d)
        if last_only:
            if sel is None:
                x = x.view(B, L, -1)[:, -1]
            else:
                ends = torch.ones_like(sel, dtype=torch.bool)
                row = torch.div(sel, L, rounding_mode="floor")
                ends[:-1] = row[1:] != row[:-1]
                x = x[ends]
        logits = self._logits(x)
        if sel is None and not last_only:
            logits = logits.view(B, L, -1)
        return (logits, kvs) if want_kv else logits

    # ------------------------------------------------------------------------------------------------------------
    # KV-cached decoding (no grad)
    def prefill(self, ids, mask, weights):
        """Run the left-padded prompts ``ids`` / ``mask`` (G, P); return the last column's logits (G, V) and the
        prompts' keys and values, one tensor (layers, 2, G, H, P, D)."""
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        sel = mask.reshape(-1).nonzero().squeeze(1)  # the prompts' real tokens
        logits, kvs = self.forward(ids, pos, prompt_bias(mask), weights=weights, want_kv=True, last_only=True,
                                   sel=sel)  # fmt: skip
        return logits, torch.stack([torch.stack(kv) for kv in kvs])

    def decode(self, tok, pos, prompt_kv, prompt_bias_rows, slots, n, comp_kv, col: int, weights):
        """One token per cache row: ``tok`` (b,) at positions ``pos`` (b,). Row r continues prompt ``group[r]``
        is slot ``slots[r]`` of the (G n) layout (prompt ``slots[r] // n``). Attention is split: the prompt part attends to the prompt's
        keys held ONCE per prompt (``prompt_kv`` (layers, 2, G, H, P, D), masked by ``prompt_bias_rows`` (b, 1, 1,
        P)), computed as one (n x P) product per prompt; the completion part to the row's own keys in ``comp_kv``
        (layers, 2, b, H, T, D), into whose column ``col`` this token's keys and values are written. One softmax
        over both parts: the attention of the full sequence. Returns the logits (b, V)."""
        b = tok.shape[0]
        H, D = self.n_heads, self.head_dim
        G = prompt_kv.shape[2]
        scale = D**-0.5
        cos_t, sin_t = self._tables(tok.device)
        cos, sin = cos_t[pos].view(b, 1, 1, 1, D), sin_t[pos].view(b, 1, 1, 1, D)
        x = F.embedding(tok, self.embed).unsqueeze(1)  # (b, 1, hidden)
        P = prompt_kv.shape[4]
        full = b == G * n
        for i, (n1, qkv_w, o, n2, gu, d) in enumerate(weights):
            h = F.rms_norm(x, (self.hidden,), n1, self.eps)
            qkv = F.linear(h, qkv_w).view(b, 3, H, 1, D)  # L = 1: a unit length axis
            qk = self._rope(qkv[:, :2], cos, sin)
            layer = comp_kv[i]
            layer[0, :, :, col : col + 1] = qk[:, 1]
            layer[1, :, :, col : col + 1] = qkv[:, 2]
            q = qk[:, 0, :, 0] * scale  # (b, H, D)
            # prompt part: the rows of each prompt as one (n, D) x (D, P) product
            q_slots = q if full else q.new_zeros(G * n, H, D).index_copy_(0, slots, q)
            s_p = torch.matmul(q_slots.view(G, n, H, D).transpose(1, 2), prompt_kv[i, 0].transpose(-1, -2))
            s_p = s_p.transpose(1, 2).reshape(G * n, H, P)
            if not full:
                s_p = s_p.index_select(0, slots)
            s_c = torch.matmul(q.unsqueeze(2), layer[0, :, :, : col + 1].transpose(-1, -2)).squeeze(2)  # (b, H, t)
            p = torch.softmax(torch.cat([s_p + prompt_bias_rows, s_c], -1), -1)
            p_p, p_c = p[..., :P], p[..., P:]
            if not full:
                p_p = p_p.new_zeros(G * n, H, P).index_copy_(0, slots, p_p)
            a = torch.matmul(p_p.view(G, n, H, P).transpose(1, 2), prompt_kv[i, 1]).transpose(1, 2).reshape(G * n, H, D)
            if not full:
                a = a.index_select(0, slots)
            a = a + (p_c.unsqueeze(-1) * layer[1, :, :, : col + 1]).sum(2)  # faster than a batch of 1-row products
            x = x + F.linear(a.reshape(b, 1, H * D), o)
            x = self._mlp(x, n2, gu, d)
        return self._logits(x)[:, 0]


def prompt_bias(mask: torch.Tensor) -> torch.Tensor:
    """Additive attention mask (G, 1, P, P) of left-padded prompts: causal, padding keys hidden; a padding query
    also sees itself (its output is never used; no row is all -inf)."""
    P = mask.shape[1]
    causal = torch.ones(P, P, dtype=torch.bool, device=mask.device).tril()
    allowed = causal & mask.bool().unsqueeze(1)
    allowed = allowed | torch.eye(P, dtype=torch.bool, device=mask.device)
    return torch.zeros(allowed.shape, device=mask.device).masked_fill_(~allowed, float("-inf")).unsqueeze(1)
