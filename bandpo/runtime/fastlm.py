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
1e-5 in tests/unit/test_fastlm.py), not bit for bit. `FastLlama.for_model` returns ``None`` for a model it does not
cover (another architecture, biases, a non-default rotary embedding, attention or logit soft-capping, any hook on a
module), and the callers then use the HF module itself.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch.nn.modules import module as nn_module

from bandpo.runtime import ckernel

__all__ = ["CharTokenizer", "FastLlama", "TinyLlama", "gather_rows", "light_loadable", "load_light"]

_ATTR = "_bandpo_fastllama"


def _has_hooks(model) -> bool:
    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or getattr(m, "_backward_pre_hooks", None):
            return True
    return bool(nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks)


class FastLlama:
    """Functional forward of one ``LlamaForCausalLM`` (see the module docstring)."""

    def __init__(self, model) -> None:
        cfg = model.config
        self.model = model
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads  # grouped-query attention
        self.group = self.n_heads // self.n_kv  # query heads per key / value head
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
        if fast is False or (fast is not None and _has_hooks(model)):
            return None
        if (
            fast is not None
            and fast.embed is model.model.embed_tokens.weight
            and fast.layers[0][1] is (model.model.layers[0].self_attn.q_proj.weight)
        ):
            return fast
        # first use, or the parameters were replaced (e.g. a move to another device): (re)made
        ok = cls.supports(model)
        model.__dict__[_ATTR] = cls(model) if ok else False
        return model.__dict__[_ATTR] or None

    @staticmethod
    def supports(model) -> bool:
        if type(model) is TinyLlama:
            return not _has_hooks(model) and all(p.dtype == torch.float32 for p in model.parameters())
        # a LlamaForCausalLM exists only once transformers is imported: looked up, not imported, so that this module
        # stays free of transformers' import (the light load's point, `load_light`)
        transformers = sys.modules.get("transformers")
        if transformers is None or type(model) is not transformers.LlamaForCausalLM or _has_hooks(model):
            return False
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            return False
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
            return False
        n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        if getattr(cfg, "hidden_act", "silu") != "silu" or cfg.num_attention_heads % n_kv:
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
            with torch.no_grad():
                if isinstance(self.model, TinyLlama):
                    cos, sin = self.model.rope_tables(device)
                else:
                    pos = torch.arange(self.max_pos, device=device).unsqueeze(0)
                    probe = torch.zeros(1, device=device, dtype=torch.float32)
                    cos, sin = self.model.model.rotary_emb(probe, pos)
                    cos, sin = cos[0].float(), sin[0].float()
            half = self.head_dim // 2
            sin = torch.cat([-sin[:, :half], sin[:, half:]], -1)  # rotate_half(x) * sin == roll(x, half) * this
            self._cos, self._sin, self._table_device = cos.contiguous(), sin.contiguous(), device
        return self._cos, self._sin

    def weights(self) -> list[tuple[torch.Tensor, ...]]:
        """Per layer (norm 1, fused q|k|v, o, norm 2, fused gate|up, down); differentiable concatenations."""
        return [(n1, torch.cat([q, k, v]), o, n2, torch.cat([g, u]), d) for n1, q, k, v, o, n2, g, u, d in self.layers]

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
        H, K, D = self.n_heads, self.n_kv, self.head_dim
        cos_t, sin_t = self._tables(ids.device)
        cos, sin = cos_t[pos].unsqueeze(1), sin_t[pos].unsqueeze(1)  # (B, 1, L, D)
        flat = ids.reshape(-1) if sel is None else ids.reshape(-1)[sel]
        x = F.embedding(flat, self.embed)  # (N, hidden): N = B L or len(sel)
        kvs = []
        for i, (n1, qkv_w, o, n2, gu, d) in enumerate(W):
            h = F.rms_norm(x, (self.hidden,), n1, self.eps)
            qkv = F.linear(h, qkv_w)
            if sel is not None:
                qkv = qkv.new_zeros(B * L, (H + 2 * K) * D).index_copy_(0, sel, qkv)  # in place: no second buffer
            if K == H:
                # split in the (B, L, 3, H, D) layout, then permuted: the backward is one cat written in that layout
                qk, v = qkv.view(B, L, 3, H, D).split([2, 1], 2)
                q, k = self._rope(qk.permute(2, 0, 3, 1, 4), cos, sin).unbind(0)  # (B, H, L, D) each
                v = v.squeeze(2).transpose(1, 2)
            else:  # grouped-query: H query heads, then K key heads, then K value heads; rope on the first H + K
                qk, v = qkv.view(B, L, H + 2 * K, D).split([H + K, K], 2)
                q, k = self._rope(qk.transpose(1, 2), cos, sin).split([H, K], 1)  # (B, H, L, D), (B, K, L, D)
                v = v.transpose(1, 2)
            if want_kv:
                kvs.append((k, v))
            if past is not None:
                k = torch.cat([past[i][0], k], 2)
                v = torch.cat([past[i][1], v], 2)
            # enable_gqa: query head h attends to key / value head h // (H / K) (HF's repeat_kv), without copies
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=K != H)
            a = a.transpose(1, 2).reshape(B * L, H * D)
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
        prompts' keys and values, one tensor (layers, 2, G, K, P, D) (K: the key / value heads)."""
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        sel = mask.reshape(-1).nonzero().squeeze(1)  # the prompts' real tokens
        logits, kvs = self.forward(ids, pos, prompt_bias(mask), weights=weights, want_kv=True, last_only=True,
                                   sel=sel)  # fmt: skip
        return logits, torch.stack([torch.stack(kv) for kv in kvs])

    def decode(self, tok, pos, prompt_kv, prompt_bias_rows, slots, n, comp_kv, col: int, weights, scratch=None):
        """One token per cache row: ``tok`` (b,) at positions ``pos`` (b,); row r is slot ``slots[r]`` of the
        (G n) layout, i.e. continues prompt ``slots[r] // n``. Attention is split: the prompt part attends to the
        prompt's keys held ONCE per prompt (``prompt_kv`` (layers, 2, G, K, P, D), masked by ``prompt_bias_rows``
        (b, 1, P)), computed as one (n x P) product per prompt; the completion part to the row's own keys in
        ``comp_kv`` (layers, 2, b, K, T, D), into whose column ``col`` this token's keys and values are written.
        One softmax over both parts: the attention of the full sequence. Returns the logits (b, V). K: the key /
        value heads (grouped-query attention: query head h reads key / value head h // (H / K); K = H otherwise).

        ``scratch``: a float32 tensor of at least P + T + 4 elements: the attention of each layer is then
        `bandpo.runtime.ckernel.attention` (the same function in one C call, equal up to float rounding) instead of
        the PyTorch operations below."""
        b = tok.shape[0]
        H, K, D = self.n_heads, self.n_kv, self.head_dim
        scale = D**-0.5
        cos_t, sin_t = self._tables(tok.device)
        cos_rows, sin_rows = cos_t[pos], sin_t[pos]  # (b, D)
        x = F.embedding(tok, self.embed).unsqueeze(1)  # (b, 1, hidden)
        if scratch is not None:
            for i, (n1, qkv_w, o, n2, gu, d) in enumerate(weights):
                qkv = F.linear(F.rms_norm(x, (self.hidden,), n1, self.eps), qkv_w).view(b, H + 2 * K, D)
                a = ckernel.attention(qkv, cos_rows, sin_rows, prompt_kv[i, 0], prompt_kv[i, 1], prompt_bias_rows,
                                      slots, n, comp_kv[i, 0], comp_kv[i, 1], col, scale, scratch,
                                      check=i == 0)  # fmt: skip
                x = self._mlp(x + F.linear(a.view(b, 1, H * D), o), n2, gu, d)
            return self._logits(x)[:, 0]
        G, P = prompt_kv.shape[2], prompt_kv.shape[4]
        full = b == G * n
        if K != H:
            cos, sin = cos_rows.view(b, 1, D), sin_rows.view(b, 1, D)
            for i, (n1, qkv_w, o, n2, gu, d) in enumerate(weights):
                qkv = F.linear(F.rms_norm(x, (self.hidden,), n1, self.eps), qkv_w).view(b, H + 2 * K, D)
                a = self._decode_attention_gqa(qkv, cos, sin, prompt_kv[i], prompt_bias_rows, slots, n, comp_kv[i],
                                               col, scale, full)  # fmt: skip
                x = self._mlp(x + F.linear(a.view(b, 1, H * D), o), n2, gu, d)
            return self._logits(x)[:, 0]
        cos, sin = cos_rows.view(b, 1, 1, 1, D), sin_rows.view(b, 1, 1, 1, D)
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

    def _decode_attention_gqa(self, qkv, cos, sin, prompt_kv, prompt_bias_rows, slots, n, layer, col, scale, full):
        """`decode`'s attention of one layer under grouped-query attention (K < H): ``qkv`` (b, H + 2K, D) before
        rope, ``cos`` / ``sin`` (b, 1, D), ``prompt_kv`` (2, G, K, P, D), ``layer`` (2, b, K, T, D) (column ``col``
        written here). The g = H / K query heads of a key / value head and the n rows of a prompt are one (n g) x P
        product against the prompt's keys; a row's g heads one g x t product against its own completion keys."""
        b = qkv.shape[0]
        H, K, D = self.n_heads, self.n_kv, self.head_dim
        g = H // K
        G, P = prompt_kv.shape[1], prompt_kv.shape[3]
        qk = self._rope(qkv[:, : H + K], cos, sin)  # (b, H + K, D)
        layer[0, :, :, col] = qk[:, H:]
        layer[1, :, :, col] = qkv[:, H + K :]
        q = qk[:, :H] * scale  # (b, H, D): head h = kv head h // g, member h % g
        q_slots = q if full else q.new_zeros(G * n, H, D).index_copy_(0, slots, q)
        # (G, n, K, g, D) -> (G, K, n g, D): per prompt and key head, its rows' queries as one matrix
        q_p = q_slots.view(G, n, K, g, D).transpose(1, 2).reshape(G, K, n * g, D)
        s_p = torch.matmul(q_p, prompt_kv[0].transpose(-1, -2))  # (G, K, n g, P)
        s_p = s_p.view(G, K, n, g, P).transpose(1, 2).reshape(G * n, H, P)
        if not full:
            s_p = s_p.index_select(0, slots)
        keys, values = layer[0, :, :, : col + 1], layer[1, :, :, : col + 1]  # (b, K, t, D)
        s_c = torch.matmul(q.view(b, K, g, D), keys.transpose(-1, -2)).view(b, H, col + 1)
        p = torch.softmax(torch.cat([s_p + prompt_bias_rows, s_c], -1), -1)
        p_p, p_c = p[..., :P], p[..., P:]
        if not full:
            p_p = p_p.new_zeros(G * n, H, P).index_copy_(0, slots, p_p)
        p_p = p_p.view(G, n, K, g, P).transpose(1, 2).reshape(G, K, n * g, P)
        a = torch.matmul(p_p, prompt_kv[1]).view(G, K, n, g, D).transpose(1, 2).reshape(G * n, H, D)
        if not full:
            a = a.index_select(0, slots)
        return a + torch.matmul(p_c.view(b, K, g, col + 1), values).view(b, H, D)


class _GatherRows(torch.autograd.Function):
    """``x.index_select(0, index)`` whose backward sums each output row's gradient into its source row with one
    ``index_add_`` over contiguous rows: autograd's own backward scatters element by element (``scatter_add_`` with
    the index expanded to the gradient's shape), several times slower on a sliced gradient. The sums are taken in
    the same order (output rows ascending), so the gradient is the same to the bit."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros((ctx.rows, *grad.shape[1:]))
        out.view(ctx.rows, -1).index_add_(0, index, grad.reshape(len(index), -1))
        return out, None


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of ``x`` (dim 0), differentiable with a fast backward (`_GatherRows`)."""
    return _GatherRows.apply(x, index) if x.requires_grad else x.index_select(0, index)


def prompt_bias(mask: torch.Tensor) -> torch.Tensor:
    """Additive attention mask (G, 1, P, P) of left-padded prompts: causal, padding keys hidden; a padding query
    also sees itself (its output is never used; no row is all -inf)."""
    P = mask.shape[1]
    causal = torch.ones(P, P, dtype=torch.bool, device=mask.device).tril()
    allowed = causal & mask.bool().unsqueeze(1)
    allowed = allowed | torch.eye(P, dtype=torch.bool, device=mask.device)
    return torch.zeros(allowed.shape, device=mask.device).masked_fill_(~allowed, float("-inf")).unsqueeze(1)


# ----------------------------------------------------------------------------------------------------------------
# Loading a tiny model without transformers (the trainer's start-up: importing transformers' model classes costs
# about 4 CPU-seconds on the testbed, more than the rest of a job's start-up together)


class _Norm(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))


class _Attention(torch.nn.Module):
    def __init__(self, d: int, inner: int) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(d, inner, bias=False)
        self.k_proj = torch.nn.Linear(d, inner, bias=False)
        self.v_proj = torch.nn.Linear(d, inner, bias=False)
        self.o_proj = torch.nn.Linear(inner, d, bias=False)


class _MLP(torch.nn.Module):
    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(d, ff, bias=False)
        self.up_proj = torch.nn.Linear(d, ff, bias=False)
        self.down_proj = torch.nn.Linear(ff, d, bias=False)


class _Layer(torch.nn.Module):
    def __init__(self, d: int, inner: int, ff: int) -> None:
        super().__init__()
        self.self_attn = _Attention(d, inner)
        self.mlp = _MLP(d, ff)
        self.input_layernorm = _Norm(d)
        self.post_attention_layernorm = _Norm(d)


class _Body(torch.nn.Module):
    def __init__(self, cfg) -> None:
        super().__init__()
        d, inner = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
        # given its weight, Embedding skips its random init, whose meta-device path imports torch._dynamo (~1 s)
        self.embed_tokens = torch.nn.Embedding(cfg.vocab_size, d, _weight=torch.empty(cfg.vocab_size, d))
        self.layers = torch.nn.ModuleList(_Layer(d, inner, cfg.intermediate_size) for _ in range(cfg.num_hidden_layers))
        self.norm = _Norm(d)


class TinyLlama(torch.nn.Module):
    """The parameters of a Hugging Face ``LlamaForCausalLM`` with tied embeddings, under the same names and in the
    same order (so ``state_dict``, the optimizer's parameter order and the saved file are HF's), computed by
    `FastLlama`; ``save_pretrained`` writes the HF layout (``model.safetensors`` as HF writes it, the config files
    of the source folder copied), which ``from_pretrained`` loads back. Made by `load_light` only."""

    def __init__(self, cfg, source: Path) -> None:
        super().__init__()
        self.config = cfg
        self.source = source
        self.model = _Body(cfg)
        self.lm_head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight

    def _apply(self, fn, *args, **kwargs):
        """A move to another device may make new parameter objects, one per module: tie the head again."""
        super()._apply(fn, *args, **kwargs)
        self.lm_head.weight = self.model.embed_tokens.weight
        return self

    def rope_tables(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin per position (max_position_embeddings, head_dim), computed as HF's default rotary embedding."""
        D, theta = self.config.head_dim, float(self.config.rope_parameters["rope_theta"])
        inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / D))
        pos = torch.arange(self.config.max_position_embeddings, device=device).float()
        freqs = inv_freq[:, None].float() @ pos[None, :]  # as HF: an outer product in float32
        emb = torch.cat([freqs.T, freqs.T], -1)
        return emb.cos(), emb.sin()

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **_ignored):
        """HF-style full forward (no cache): ``.logits`` (B, L, V); padding keys hidden by ``attention_mask``."""
        B, L = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(L, device=input_ids.device).expand(B, L)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        causal = torch.ones(L, L, dtype=torch.bool, device=input_ids.device).tril()
        allowed = (causal & mask.bool().unsqueeze(1)) | torch.eye(L, dtype=torch.bool, device=input_ids.device)
        bias = torch.zeros(allowed.shape, device=input_ids.device).masked_fill_(~allowed, float("-inf")).unsqueeze(1)
        fast = FastLlama.for_model(self)
        assert fast is not None, "TinyLlama with hooks is not supported"
        return SimpleNamespace(logits=fast.forward(input_ids, position_ids, bias))

    def save_pretrained(self, out_dir) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "generation_config.json"):
            if (self.source / name).is_file():
                shutil.copyfile(self.source / name, out / name)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items() if k != "lm_head.weight"}
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


class CharTokenizer:
    """The suite's character tokenizer (`bandpo.models.tiny.build_tokenizer`) read from its ``tokenizer.json`` with the
    ``tokenizers`` library alone: what the trainer and the sampler call of ``PreTrainedTokenizerFast`` (encode
    without special tokens, with left or right padding; decode skipping special tokens; save)."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self._tk = Tokenizer.from_file(str(source / "tokenizer.json"))
        self._tk.no_padding()
        self._tk.no_truncation()
        conf = json.loads((source / "tokenizer_config.json").read_text())
        self.pad_token_id = self._tk.token_to_id(conf["pad_token"])
        self.eos_token_id = self._tk.token_to_id(conf["eos_token"])
        self.padding_side = conf.get("padding_side", "left")

    def __len__(self) -> int:
        return self._tk.get_vocab_size(with_added_tokens=True)

    def __call__(self, texts, return_tensors=None, padding=False, add_special_tokens=False, **_ignored):
        single = isinstance(texts, str)
        ids = [
            e.ids
            for e in self._tk.encode_batch([texts] if single else list(texts), add_special_tokens=add_special_tokens)
        ]
        if return_tensors is None and not padding:
            return _Encoding(input_ids=ids[0] if single else ids)
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), width), dtype=torch.long)
        for r, x in enumerate(ids):
            if not x:
                continue
            cols = slice(width - len(x), width) if self.padding_side == "left" else slice(0, len(x))
            input_ids[r, cols] = torch.tensor(x)
            attention_mask[r, cols] = 1
        return _Encoding(input_ids=input_ids, attention_mask=attention_mask)

    def batch_decode(self, ids, skip_special_tokens=True, **_ignored):
        rows = ids.tolist() if isinstance(ids, torch.Tensor) else [list(r) for r in ids]
        return self._tk.decode_batch(rows, skip_special_tokens=skip_special_tokens)

    def decode(self, ids, skip_special_tokens=True, **_ignored):
        row = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self._tk.decode(row, skip_special_tokens=skip_special_tokens)

    def save_pretrained(self, out_dir) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (self.source / name).is_file():
                shutil.copyfile(self.source / name, out / name)


class _Encoding(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device):
        return _Encoding({k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.items()})


def light_loadable(model_dir) -> bool:
    """Whether `load_light` can load this folder: a tiny Llama of the kind `FastLlama` covers (tied embeddings,
    float32 weights in one ``model.safetensors``) with the suite's character tokenizer."""
    src = Path(model_dir)
    try:
        cfg = json.loads((src / "config.json").read_text())
        tok = json.loads((src / "tokenizer.json").read_text())
        tok_conf = json.loads((src / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    rope = cfg.get("rope_parameters") or {}
    checks = [
        cfg.get("model_type") == "llama",
        cfg.get("architectures") == ["LlamaForCausalLM"],
        cfg.get("tie_word_embeddings") is True,
        not cfg.get("attention_bias") and not cfg.get("mlp_bias"),
        cfg.get("hidden_act") == "silu",
        cfg.get("num_key_value_heads") == cfg.get("num_attention_heads"),
        cfg.get("pretraining_tp", 1) == 1 and not cfg.get("attention_dropout"),
        rope.get("rope_type") == "default" and "rope_theta" in rope and not cfg.get("rope_scaling"),
        cfg.get("dtype", "float32") == "float32",
        (cfg.get("head_dim") or 0) * (cfg.get("num_attention_heads") or 0) == cfg.get("hidden_size"),
        (src / "model.safetensors").is_file(),
        (tok.get("model") or {}).get("type") == "WordLevel",
        (tok.get("decoder") or {}).get("type") == "Fuse",
        (tok.get("pre_tokenizer") or {}).get("type") == "Split",
        tok.get("normalizer") is None,
        not tok_conf.get("chat_template"),  # a chat template (transformers 5 saves it beside, as below)
        not any((src / name).exists() for name in ("chat_template.jinja", "chat_template.json")),
        "pad_token" in tok_conf and "eos_token" in tok_conf,
    ]
    return all(checks)


def load_light(model_dir):
    """(model, tokenizer) of a `light_loadable` folder without importing transformers: a `TinyLlama` in eval
    mode holding the saved float32 weights, and a `CharTokenizer`."""
    src = Path(model_dir)
    cfg = SimpleNamespace(**json.loads((src / "config.json").read_text()))
    with torch.device("meta"):
        model = TinyLlama(cfg, src)
    state = load_file(str(src / "model.safetensors"))
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied again after assign
    model.eval()
    return model, CharTokenizer(src)
