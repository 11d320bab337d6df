"""The suite's own lm-eval model class, ``bandpo-tiny``: the tiny Llamas scored without lm-eval's HF backend.

lm-eval stays the scorer (its task YAMLs, requests, filters, metrics and output files); only the model class is
ours, registered in lm-eval's model registry (``lm_eval.api.registry.register_model``) and named by the config's
``eval.backend: bandpo-tiny``. Importing lm-eval's HF backend (``lm_eval.models.huggingface``: transformers' Auto
classes, and through them scikit-learn and torch._dynamo) costs several seconds of every scoring process; this
class loads a `bandpo.runtime.fastlm.light_loadable` folder with `bandpo.runtime.fastlm.load_light` (the weights from
safetensors, the character tokenizer from the ``tokenizers`` library) and imports no transformers at all.

It answers ``generate_until`` requests the way the ``hf`` backend of `bandpo.score.evaluate` does for these models,
step for step, so that a seed gives the same completions under either:

- requests grouped by their generation arguments and ordered longest context first (lm-eval's ``Collator``), in
  batches of ``batch_size``;
- contexts encoded without special tokens, left-padded to the longest and left-truncated to ``max_length -
  max_gen_toks`` (``max_length``: the model's ``max_position_embeddings``);
- completions drawn by the suite's sampler (`sample_completions`: softmax(logits / T), EOS ends a completion, at most
  ``max_gen_toks`` tokens, each prompt pre-filled once for its adjacent repeats) from torch's generator, which
  lm-eval seeds per run;
- decoded skipping special tokens and cut at the stop sequences (lm-eval's ``postprocess_generated_text``).

Only plain sampling is supported (``do_sample`` true, temperature > 0, no top-k / top-p below 1, no stop sequence
but EOS), which every task of the embedded profile asks for; another request, a log-likelihood request or a model
folder `load_light` cannot load is an error that names the ``hf`` backend as the way to score it.
"""

from __future__ import annotations

from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import Collator, handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm import tqdm

from bandpo.runtime.fastlm import light_loadable, load_light
from bandpo.runtime.sampling import sample_rows

NAME = "bandpo-tiny"
PLAIN_SAMPLING_KEYS = {"do_sample", "temperature", "top_k", "top_p", "until", "max_gen_toks"}


def plain_sampling(kwargs: dict[str, Any], stop: list[str], eos_text: str) -> bool:
    """Whether normalised generation arguments ask for plain sampling: softmax(logits / T) with T > 0, no top-k,
    top-p 1, stopping at EOS only."""
    return (
        set(kwargs) <= PLAIN_SAMPLING_KEYS
        and kwargs.get("do_sample") is True
        and float(kwargs.get("temperature") or 0.0) > 0.0
        and kwargs.get("top_k") in (None, 0)
        and kwargs.get("top_p") in (None, 1.0)
        and all(s == eos_text for s in stop)
    )


def sample_completions(model, context: torch.Tensor, mask: torch.Tensor, new: int, temperature: float, eos: int,
                       pad: int) -> torch.Tensor:  # fmt: skip
    """Each left-padded context row (B, P) followed by a sampled completion of at most ``new`` tokens, padded with
    ``pad`` after EOS: (B, P + T). lm-eval's repeats of a prompt are adjacent rows (its batches are sorted by
    context); when the batch is equal runs of identical rows, each prompt is pre-filled once for its n rows, as in
    training (`bandpo.runtime.sampling.sample_rows`)."""
    same = (context[1:] == context[:-1]).all(1) & (mask[1:] == mask[:-1]).all(1)
    dev = context.device
    starts = torch.cat([torch.ones(1, dtype=torch.bool, device=dev), ~same]).nonzero().squeeze(1)
    n = context.shape[0] // len(starts)
    if n * len(starts) != context.shape[0] or not bool((starts == torch.arange(len(starts), device=dev) * n).all()):
        starts, n = torch.arange(context.shape[0], device=dev), 1
    tokens, resp, _ = sample_rows(model, context[starts], mask[starts], n, new, temperature, eos)
    return torch.cat([context, torch.where(resp, tokens, pad)], 1)


@register_model(NAME)
class TinyLM(LM):
    """lm-eval model of a tiny Llama folder (see the module docstring). ``pretrained``: the model folder;
    ``batch_size``: requests per batch (as the ``hf`` backend's); ``max_gen_toks``: the default when a task sets
    none. ``device`` must be cpu; ``dtype`` float32 (the folder's own); other ``hf`` arguments are accepted and
    ignored only when they do not change the result (``max_batch_size``, ``trust_remote_code``)."""

    def __init__(self, pretrained: str, batch_size: int | str = 1, max_gen_toks: int = 256, device: str = "cpu",
                 dtype: str = "float32", max_batch_size: int | None = None, trust_remote_code: bool = False,
                 **unknown: Any) -> None:  # fmt: skip
        super().__init__()
        if unknown:
            raise ValueError(f"{NAME}: unknown model argument(s) {sorted(unknown)} (use --backend hf for them)")
        if str(device) != "cpu" or str(dtype) not in ("float32", "torch.float32", "auto"):
            raise ValueError(f"{NAME}: scores on cpu in float32 only (got device={device}, dtype={dtype})")
        if not light_loadable(pretrained):
            raise ValueError(f"{NAME}: {pretrained} is not a tiny Llama folder the suite built (bandpo.runtime.fastlm."
                             "light_loadable); score it with --backend hf")  # fmt: skip
        if str(batch_size).startswith("auto"):
            raise ValueError(f"{NAME}: batch_size must be a number (got {batch_size!r})")
        self.model, self.tokenizer = load_light(pretrained)
        self.batch_size = int(batch_size)
        self.max_gen_toks = int(max_gen_toks)
        self.max_length = int(self.model.config.max_position_embeddings)
        self.eot_token_id = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.eot_token_id

    def tok_encode(self, text: str) -> list[int]:
        return self.tokenizer(text).input_ids

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"{NAME} answers generate_until requests only; score this task with --backend hf")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"{NAME} answers generate_until requests only; score this task with --backend hf")

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        eos_text = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        order = Collator(
            [r.args for r in requests],
            sort_fn=lambda req: (-len(self.tok_encode(req[0])), req[0]),  # longest context first, as lm-eval's hf
            group_by="gen_kwargs",
            group_fn=lambda req: req[1],
        )
        out: list[str] = []
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc=f"{NAME}: generate_until")
        for chunk in order.get_batched(n=self.batch_size):
            contexts, all_kwargs = zip(*chunk, strict=True)
            kwargs = dict(normalize_gen_kwargs(all_kwargs[0], self.max_gen_toks))
            stop = handle_stop_sequences(kwargs.get("until"), eos=eos_text)
            if not plain_sampling(kwargs, stop, eos_text):
                raise ValueError(f"{NAME} samples plainly (do_sample, temperature > 0, stop at EOS only); this task "
                                 f"asks for {all_kwargs[0]}: score it with --backend hf")  # fmt: skip
            new = int(kwargs["max_gen_toks"])
            if new >= self.max_length:
                raise ValueError(f"{NAME}: max_gen_toks {new} leaves no room for a prompt (max length "
                                 f"{self.max_length})")  # fmt: skip
            self.tokenizer.padding_side = "left"
            enc = self.tokenizer(list(contexts), return_tensors="pt", padding=True)
            keep = self.max_length - new  # left truncation, as lm-eval's hf backend
            context, mask = enc.input_ids[:, -keep:], enc.attention_mask[:, -keep:]
            with torch.inference_mode():
                rows = sample_completions(self.model, context, mask, new, float(kwargs["temperature"]),
                                          self.eot_token_id, self.pad_token_id)  # fmt: skip
            for row, ctx in zip(rows[:, context.shape[1] :].tolist(), contexts, strict=True):
                text = postprocess_generated_text(self.tokenizer.decode(row), stop=stop, think_end_token=None)
                out.append(text)
                self.cache_hook.add_partial("generate_until", (ctx, all_kwargs[0]), text)
                bar.update(1)
        bar.close()
        return order.get_original(out)
