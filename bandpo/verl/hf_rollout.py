"""The "hf" rollout of verl's CPU profile (``actor_rollout_ref.rollout.name=hf``): a `HFReplica` starts one
`HFRolloutServer` Ray actor that serves a step's requests as one batch, drawn by the suite's sampler for the tiny
Llamas (else transformers ``generate``), and returns each token's log-probability under the sampling temperature
(its settings: ``engine_kwargs.hf``, `server_options`; `bandpo.verl.command` sets ``max_batch`` to a step's request
count); the trainer workers' `HFServerAdapter` pushes the actor's weights to it after every update (verl's "naive"
weight sync). `register_rollout` enters it in verl's two rollout registries; `bandpo.verl.cpu` calls it.

Known limits: one server per replica, which batches the requests that reach it together (`HFRolloutServer`), no
multi-modal input, no tensor parallelism.

Reproducible rollouts: verl's agent loop sends a step's requests concurrently, so they reach the server in an order
that changes from run to run (asyncio tasks, Ray's delivery), and verl's own request ids are fresh uuid4s. The server
therefore never samples in arrival order: it sorts a batch by each request's `request_order` (the sample's place
in the step, ``det-<index * SAMPLE_STRIDE + session>``, when verl passes its deterministic request id:
``rollout.full_determinism=true`` with `bandpo.verl.cpu`'s agent loop, which `bandpo.verl.command` selects for this
rollout; else the prompt's tokens) and seeds torch's generator for the batch from the rollout seed, the weights'
version and that order (`batch_seed`). One seed then gives one run, as long as each pass of requests (a step's, a
validation's) is gathered whole before it is served: a step's as one batch (``max_batch`` = the step's request
count, as `bandpo.verl.command` sets it), a larger validation pass with ``gather_passes``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
import sys
import time
from typing import Any

import ray
import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, RolloutReplicaRegistry, TokenOutput

from bandpo.runtime import sampling
from bandpo.runtime.fastlm import FastLlama

ROLLOUT = "hf"
SERVER_NAME = "bandpo_hf_rollout_{rank}"  # Ray actor name of replica `rank`'s server
SAMPLERS = ("suite", "generate")  # HFRolloutServer's samplers
SAMPLE_STRIDE = 1_000_000  # a sample's priority: its prompt's data index * SAMPLE_STRIDE + its session (0 .. n-1)
_DET_ID = re.compile(r"det-(\d+)")  # verl's request id under rollout.full_determinism: det-<priority>


def request_order(request_id: str, prompt_ids: list[int]) -> tuple:
    """Where a request goes in its batch: by verl's deterministic id ``det-<priority>`` (`SAMPLE_STRIDE`) when it
    has one, else by the prompt's tokens (a run-independent set of rows; which of a prompt's requests gets which
    row then still follows arrival)."""
    m = _DET_ID.fullmatch(str(request_id))
    return (0, int(m.group(1)), tuple(prompt_ids)) if m else (1, -1, tuple(prompt_ids))


def batch_seed(seed: int, weight_version: int, orders: list[tuple]) -> int:
    """The seed of torch's generator for one served batch: a function of the rollout seed, the weights' version and
    the batch's sorted requests, never of arrival order or of earlier batches."""
    digest = hashlib.sha256(repr((int(seed), int(weight_version), orders)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclasses.dataclass
class _Request:
    """One queued ``generate`` call: its prompt, the sampling settings it can be batched under, and its future."""

    prompt_ids: list[int]
    key: tuple[int, float, float, int]  # (max new tokens, temperature, top_p, top_k)
    future: asyncio.Future
    order: tuple = ()  # `request_order`: the request's place in a batch
    arrived: float = dataclasses.field(default_factory=time.monotonic)


class HFRolloutServer:
    """One rollout server (a Ray actor): token ids in, sampled token ids and their log-probs out.

    ``generate`` is the method verl's ``LLMServerClient`` calls, once per sample and all of a step's samples at
    once (verl's agent loop awaits them together). The server batches them: a call queues its request, and a flush
    task, started by the first call, gathers requests until ``max_batch`` are queued or the queue has not grown for
    ``batch_wait_s``, then serves the queue in batches of at most ``max_batch`` requests with the same sampling
    settings. ``max_batch=1`` serves one request at a time. verl's agent loop hands a step's requests over in
    bursts (tens of ms apart, and the next one waits while a batch being served holds the actor's event loop), so a
    short quiet window would split every step into several batches, each paying the whole sequential decode. Set
    ``max_batch`` to a step's request count (prompts x samples): the step is then one batch, served as soon as its
    last request is queued (the quiet window, 2 s by default, only ends a batch that never fills; the gaps between
    bursts measured: benchmarks/CHANGELOG.md). A pass of more requests than ``max_batch`` (verl's validation:
    problems x val_k samples) would then be split by arrival; ``gather_passes`` waits for the quiet window even
    when ``max_batch`` are queued, so that the whole pass is gathered and served in batches of ``max_batch`` in
    request order, whatever the arrival order (one quiet window more per step; `bandpo.verl.command` sets it for a
    run with held-out measurements).

    ``sampler``: ``"suite"`` draws plain-sampling batches (temperature > 0, no top-k / top-p) of a model
    `bandpo.runtime.fastlm.FastLlama` covers (the suite's tiny Llamas) with the suite's sampler
    (`bandpo.runtime.sampling.sample_rows`, the local trainer's: each distinct prompt pre-filled once for its
    samples; the same distribution softmax(logits / T), EOS ends a completion, the sampled tokens' log-probs under
    it);
    everything else, and ``"generate"``, goes through transformers ``generate``. The other methods are the control
    calls verl makes on a replica's servers (sleep / wake-up, cache control, profiling), which have nothing to do
    here.
    """

    def __init__(
        self,
        model_path: str,
        response_length: int,
        max_model_len: int | None,
        dtype: str,
        seed: int,
        max_batch: int = 256,
        batch_wait_s: float = 2.0,
        sampler: str = "suite",
        gather_passes: bool = False,
    ):
        if int(max_batch) < 1 or float(batch_wait_s) < 0:
            raise ValueError(
                f"hf rollout: max_batch must be >= 1 and batch_wait_s >= 0, got {max_batch}, {batch_wait_s}"
            )
        if sampler not in SAMPLERS:
            raise ValueError(f"hf rollout: sampler must be one of {SAMPLERS}, got {sampler!r}")
        torch.manual_seed(seed)
        self.seed = int(seed)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
        self.model.eval()
        self.response_length = int(response_length)
        self.max_model_len = max_model_len
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.model.config.eos_token_id
        self.eos_token_id = eos
        self.pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else eos
        self.weight_version = 0
        self.max_batch = int(max_batch)
        self.batch_wait_s = float(batch_wait_s)
        self.gather_passes = bool(gather_passes)
        self.sampler = sampler
        # per served batch: its requests, the sampler used, the first request's wait in the queue, the seconds to
        # sample it (also printed to stderr, which Ray forwards to the training log)
        self.batch_log: list[dict[str, Any]] = []
        self._queue: list[_Request] = []
        self._flusher: asyncio.Task | None = None
        self._grew: asyncio.Event | None = None  # set by every queued request (made with the flush task)

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        target = self.model.state_dict()
        missing = [k for k in target if k not in state_dict and not self._tied(k)]
        unknown = [k for k in state_dict if k not in target]
        if missing or unknown:
            raise KeyError(f"hf rollout: weights do not match the model (missing {missing[:5]}, unknown {unknown[:5]})")
        with torch.no_grad():
            for name, value in state_dict.items():
                target[name].copy_(value.to(target[name].dtype))
        self.weight_version = version
        return len(state_dict)

    def _tied(self, name: str) -> bool:
        return name == "lm_head.weight" and bool(getattr(self.model.config, "tie_word_embeddings", False))

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs):
        if any(kwargs.get(k) is not None for k in ("image_data", "video_data", "audio_data")):
            raise ValueError("the hf rollout takes text prompts only")
        if not prompt_ids:
            raise ValueError(f"request {request_id}: empty prompt")
        params = dict(sampling_params)
        max_new = int(params.pop("max_tokens", params.pop("max_new_tokens", self.response_length)))
        max_new = min(max_new, self.response_length)
        if self.max_model_len:
            max_new = min(max_new, int(self.max_model_len) - len(prompt_ids))
        if max_new < 1:
            raise ValueError(f"request {request_id}: prompt of {len(prompt_ids)} tokens leaves no room to generate")
        key = (max_new, float(params.get("temperature", 1.0)), float(params.get("top_p", 1.0)),
               int(params.get("top_k", -1)))  # fmt: skip
        loop = asyncio.get_running_loop()
        prompt = [int(t) for t in prompt_ids]
        request = _Request(prompt, key, loop.create_future(), request_order(request_id, prompt))
        self._queue.append(request)
        if self._flusher is None or self._flusher.done():
            self._grew = asyncio.Event()  # of this event loop
            self._flusher = loop.create_task(self._flush())
        self._grew.set()
        token_ids, log_probs = await request.future
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.weight_version},
        )

    async def _flush(self) -> None:
        """Serve the queue until it is empty: gather requests while they keep arriving, then serve what was
        gathered in batches (`_batches`)."""
        while self._queue:
            await self._gather()
            gathered, self._queue = self._queue, []
            for batch in self._batches(gathered):
                await self._serve(batch)
                await asyncio.sleep(0)  # let requests that arrive meanwhile join the queue (the next pass)

    async def _gather(self) -> None:
        """Wait while requests keep arriving: until the queue has not grown for ``batch_wait_s`` or, unless
        ``gather_passes``, until ``max_batch`` requests are queued."""
        while self.gather_passes or len(self._queue) < self.max_batch:  # each new request restarts the window
            assert self._grew is not None
            self._grew.clear()
            try:
                await asyncio.wait_for(self._grew.wait(), self.batch_wait_s)
            except asyncio.TimeoutError:
                return

    def _batches(self, gathered: list[_Request]) -> list[list[_Request]]:
        """The gathered requests in batches of at most ``max_batch`` with the same sampling settings: by settings,
        then in request order (`request_order`), never in arrival order."""
        out = []
        for key in sorted({r.key for r in gathered}):
            same = sorted((r for r in gathered if r.key == key), key=lambda r: r.order)
            out += [same[i : i + self.max_batch] for i in range(0, len(same), self.max_batch)]
        return out

    async def _serve(self, batch: list[_Request]) -> None:
        """Sample one batch, its generator seeded by `batch_seed`, and hand each caller its completion (or the
        error)."""
        key, t0 = batch[0].key, time.monotonic()
        try:
            torch.manual_seed(batch_seed(self.seed, self.weight_version, [r.order for r in batch]))
            results = self._generate_batch([r.prompt_ids for r in batch], key)
        except Exception as exc:  # every waiting caller gets the error, none hangs
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(exc)
        else:
            for r, result in zip(batch, results, strict=True):
                if not r.future.done():
                    r.future.set_result(result)
            first = min(r.arrived for r in batch)
            served = {"requests": len(batch), "sampler": "suite" if self._suite_samples(key) else "generate",
                      "queued_s": round(t0 - first, 3), "sample_s": round(time.monotonic() - t0, 3)}  # fmt: skip
            self.batch_log.append(served)
            print(f"[bandpo.verl.cpu] served {served['requests']} requests ({served['sampler']}): the first "
                  f"queued {served['queued_s']:.2f} s, sampled in {served['sample_s']:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    def _generate_batch(self, prompts: list[list[int]], key: tuple[int, float, float, int]):
        """Sample one completion per prompt, the batch in one left-padded pass; per prompt (token ids up to and
        including the first EOS, their log-probs under the sampling temperature)."""
        max_new, temperature, top_p, top_k = key
        if self._suite_samples(key):
            return self._sample_batch(prompts, max_new, temperature)
        ids, mask = self._left_padded(prompts)
        width = ids.shape[1]
        sample = temperature > 0
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "do_sample": sample,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "return_dict_in_generate": True,
            "output_logits": True,
        }
        if sample:
            gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=mask, **gen_kwargs)
        tokens = out.sequences[:, width:]  # (B, new tokens); rows that ended early are padded after their EOS
        logits = torch.stack(out.logits, dim=1).float()  # (B, new tokens, vocab), unprocessed
        if sample and temperature != 1.0:
            logits = logits / temperature
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
        results = []
        for row, row_log_probs in zip(tokens.tolist(), log_probs.tolist(), strict=True):
            finished = self._ends(row)
            n = len(row) if finished is None else finished + 1
            results.append((row[:n], row_log_probs[:n]))
        return results

    def _suite_samples(self, key: tuple[int, float, float, int]) -> bool:
        """Whether a batch with sampling settings ``key`` goes to the suite's sampler (see the class docstring)."""
        _, temperature, top_p, top_k = key
        return (
            self.sampler == "suite"
            and temperature > 0
            and top_p >= 1.0
            and top_k <= 0
            and isinstance(self.eos_token_id, int)
            and FastLlama.for_model(self.model) is not None
        )

    def _left_padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask (len(prompts), longest), padded on the left: every prompt ends where
        generation starts."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), int(self.pad_token_id), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        return ids, mask

    def _sample_batch(self, prompts: list[list[int]], max_new: int, temperature: float):
        """`_generate_batch` with the suite's sampler. The requests of one prompt (verl sends a prompt's samples
        as separate requests) become adjacent rows of one pre-filled prompt when every prompt has as many
        requests; otherwise each request is a prompt of its own."""
        order: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompts):
            order.setdefault(tuple(p), []).append(i)
        counts = {len(v) for v in order.values()}
        if len(counts) == 1:
            n = counts.pop()
            distinct = [list(p) for p in order]
            rows = [i for members in order.values() for i in members]  # row r answers request rows[r]
        else:
            n, distinct, rows = 1, prompts, list(range(len(prompts)))
        ids, mask = self._left_padded(distinct)
        with torch.no_grad():
            tokens, resp, _, log_probs = sampling.sample_rows(self.model, ids, mask, n, max_new, temperature,
                                                     int(self.eos_token_id), with_log_probs=True)  # fmt: skip
        lengths = resp.sum(1).tolist()
        results: list[Any] = [None] * len(prompts)
        for r, (row, row_log_probs) in enumerate(zip(tokens.tolist(), log_probs.tolist(), strict=True)):
            results[rows[r]] = (row[: lengths[r]], row_log_probs[: lengths[r]])
        return results

    def _ends(self, token_ids: list[int]) -> int | None:
        eos = self.eos_token_id
        eos_set = set(eos) if isinstance(eos, (list, tuple)) else {eos}
        for i, t in enumerate(token_ids):
            if t in eos_set:
                return i
        return None

    # control calls from verl's RolloutReplica: no device memory to release or restore
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


def _model_path(model_config: Any) -> str:
    path = getattr(model_config, "local_path", None) or getattr(model_config, "path", None)
    if path is None and hasattr(model_config, "get"):
        path = model_config.get("local_path") or model_config.get("path")
    if not path:
        raise ValueError("hf rollout: the model config names no model path")
    return str(path)


def server_options(rollout_config: Any) -> dict[str, Any]:
    """`HFRolloutServer`'s batching and sampler settings from the rollout config's ``engine_kwargs.hf``
    (``+actor_rollout_ref.rollout.engine_kwargs.hf.max_batch=256``: the keys of `SERVER_OPTIONS`); the server's
    defaults for those not given. Any other key is an error."""
    engine = getattr(rollout_config, "engine_kwargs", None) or {}
    given = dict(engine.get("hf") or {})
    unknown = sorted(set(given) - set(SERVER_OPTIONS))
    if unknown:
        raise ValueError(f"hf rollout: unknown engine_kwargs.hf key(s) {unknown}; known: {', '.join(SERVER_OPTIONS)}")
    return given


SERVER_OPTIONS = ("max_batch", "batch_wait_s", "sampler", "gather_passes")  # HFRolloutServer's, from engine_kwargs.hf


class HFReplica(RolloutReplica):
    """A rollout replica served by one `HFRolloutServer` actor (hybrid mode: it shares the trainer's node)."""

    async def launch_servers(self) -> None:
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(f"hf rollout: only hybrid mode is supported, not {self.rollout_mode}")
        cfg = self.config
        options = server_options(cfg)
        server = (
            ray.remote(HFRolloutServer)
            .options(name=SERVER_NAME.format(rank=self.replica_rank), num_cpus=1, max_concurrency=4096)
            .remote(
                _model_path(self.model_config),
                cfg.response_length,
                cfg.max_model_len,
                "float32",
                int(getattr(cfg, "seed", 0) or 0),
                **options,
            )
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-rollout-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """The trainer worker's side of the hf rollout: sends the actor's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        self._server = None
        self._version = 0

    def _rank_and_leader(self) -> tuple[int, bool]:
        cfg = self.config
        per_replica = cfg.tensor_model_parallel_size * cfg.data_parallel_size * cfg.pipeline_model_parallel_size
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        return rank // per_replica, rank % per_replica == 0

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"hf rollout: weight format {wire_format!r} is not supported")
        replica, leader = self._rank_and_leader()
        state = {}
        for name, tensor in weights:  # every rank must drain the generator (it may gather shards collectively)
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            if leader:
                state[name] = tensor.detach().to("cpu", copy=True)
        if not leader:
            return
        if self._server is None:
            self._server = ray.get_actor(SERVER_NAME.format(rank=replica))
        self._version = int(kwargs.get("global_steps") or self._version + 1)
        await self._server.load_weights.remote(state, self._version)


def register_rollout() -> None:
    """Enter the "hf" rollout in verl's registries: the trainer workers' adapter (by its import path, which verl
    imports) and the replica (by a loader, which verl calls)."""
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = f"{__name__}.HFServerAdapter"
    RolloutReplicaRegistry.register(ROLLOUT, lambda: HFReplica)


register_rollout()  # at import, wherever the import starts (bandpo.verl.cpu explains why not from there)
