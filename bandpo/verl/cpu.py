"""verl on a CPU-only machine: a "cpu" platform and an "hf" rollout backend (the suite's sampler or transformers).

verl 0.9 has no CPU platform and every rollout backend it registers needs an accelerator engine (vLLM, SGLang,
TensorRT-LLM). This module fills both gaps through verl's own registries, so that ``python -m verl.trainer.main_ppo``
runs unchanged on CPU (``config/verl-cpu.yaml``): it is the way to exercise the paper path (verl's trainer, its
Ray workers, FSDP2, its checkpoints, ``verl.model_merger``) without a GPU. It is slow; it is not for paper-scale runs.

Loaded like `bandpo.verl.plugin`, by ``VERL_USE_EXTERNAL_MODULES`` (`bandpo.verl.command.VerlRun.verl_modules`
lists it), in the driver and in every Ray worker. Importing it registers, and changes nothing until selected:

* platform ``cpu`` in ``verl.plugin.platform.PlatformRegistry``: device ``cpu``, collectives ``gloo``. It is never
  auto-detected; ``VERL_PLATFORM=cpu`` selects it (set it for the driver and, through Ray's runtime_env, for the
  workers). Ray's resource is still called ``GPU``: verl's resource pools ask for GPUs, so the driver declares one
  fake GPU per trainer process (``+ray_kwargs.ray_init.num_gpus=N``).
* rollout ``hf`` in verl's two rollout registries (``actor_rollout_ref.rollout.name=hf``): the suite's sampler
  (or transformers ``generate``) in a Ray actor, `bandpo.verl.hf_rollout`.
* two adjustments when the cpu platform is selected: the warning verl's agent loop logs for every sample of a
  llama model (`QUIET_LOGGERS`) is silenced, and verl asks ``torch.distributed`` for the backend
  ``"cpu:gloo,<device>:<backend>"``, which on this platform reads ``"cpu:gloo,cpu:gloo"`` and torch rejects the
  repeated device. `_dedup_backend` wraps ``torch.distributed.init_process_group`` to drop exact repeats
  (nothing else is changed, and only in processes with ``VERL_PLATFORM=cpu``).
* replay buffer ``PollingReplayBuffer`` (``trainer.v1.sampler.custom_sampler``, verl's extension point for the
  sampler; `config/verl-cpu.yaml` selects it): verl's own sync ``ReplayBuffer`` that looks for finished rollouts
  every `POLL_INTERVAL_S` seconds instead of verl's 2.0. The trainer waits for a step's rollouts by polling, so
  with verl's default the generation phase of a step lasts a whole number of 2-second polls, rounding the work
  inside it up (benchmarks/CHANGELOG.md has the measurement). Only the waiting changes; what is sampled and trained
  is verl's. It does not take verl's DAPO group filtering (a custom sampler gets no ``filter_groups`` settings):
  the profile has no dynamic-sampling row. It also hands the trainer a step's samples in one fixed order
  (`PollingReplayBuffer._materialize_batch`): verl's lists them in the order their rollouts finished, which changes
  from run to run, and the order decides the mini-batches and the float sums of every update.
* agent loop ``bandpo_single_turn`` (`AGENT_LOOP`, in agent_loops.yaml; `bandpo.verl.command` selects it for the
  hf rollout, with ``rollout.full_determinism=true``): verl's single-turn agent loop, giving each sample a priority
  that is its place in the step (the prompt's data index and the sample's session), so that its request id,
  ``det-<priority>``, is the same in every run: the hf server samples in that order (`bandpo.verl.hf_rollout`).

Together: one seed gives one run (tests/integration/test_verl_cpu.py runs a short run twice).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from bandpo.verl import hf_rollout

logger = logging.getLogger(__name__)

PLATFORM = "cpu"
PLATFORM_ENV = "VERL_PLATFORM"


# ----------------------------------------------------------------------------------------------------------------
# The platform


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


_CPU = torch.device("cpu")


def _cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module (memory queries read 0)."""
    mod = types.ModuleType("bandpo_cpu_device")
    for name in ("Stream", "Event", "stream", "current_stream", "synchronize", "is_available"):
        setattr(mod, name, getattr(torch.cpu, name))
    mod.device_count = lambda: 1
    mod.current_device = lambda: _CPU
    mod.set_device = _no_op
    mod.get_device_name = lambda device=None: "cpu"
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.get_rng_state = lambda device=None: torch.get_rng_state()
    mod.set_rng_state = lambda state, device=None: torch.set_rng_state(state)
    for name in ("empty_cache", "ipc_collect", "set_per_process_memory_fraction", "reset_peak_memory_stats"):
        setattr(mod, name, _no_op)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, lambda device=None: 0)
    mod.mem_get_info = lambda device=None: (0, 0)
    return mod


_DEVICE_MODULE = _cpu_device_module()


@PlatformRegistry.register(platform=PLATFORM)
class CPUPlatform(PlatformBase):
    """verl platform for machines without an accelerator: torch's CPU device and gloo collectives."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: VERL_PLATFORM=cpu selects it

    def current_device(self) -> torch.device:
        # verl passes this to .to(device=...) and torch.device(...): an int would mean an accelerator index
        return _CPU

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the fake GPU resource

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _dedup_backend(init_process_group):
    @functools.wraps(init_process_group)
    def wrapper(*args: Any, **kwargs: Any):
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            parts = [p.strip() for p in backend.split(",")]
            kwargs["backend"] = ",".join(dict.fromkeys(parts))
        return init_process_group(*args, **kwargs)

    wrapper._bandpo_dedup = True
    return wrapper


def cpu_selected() -> bool:
    return os.environ.get(PLATFORM_ENV, "").strip().lower() == PLATFORM


if cpu_selected() and not getattr(torch.distributed.init_process_group, "_bandpo_dedup", False):
    torch.distributed.init_process_group = _dedup_backend(torch.distributed.init_process_group)

# verl's agent loop builds a token helper per sample, and for a llama config.json each build warns that no
# model-specific builder is registered (one warning per sample, each relayed by Ray to the driver's log). The
# generic builder is the right one for the tiny llamas: keep its errors only.
QUIET_LOGGERS = ("verl.utils.tokenizer.continuous_token_wiring",)
if cpu_selected():
    for _name in QUIET_LOGGERS:
        logging.getLogger(_name).setLevel(logging.ERROR)


# ----------------------------------------------------------------------------------------------------------------
# The replay buffer

POLL_INTERVAL_S = 0.05  # verl's ReplayBuffer: 2.0


def trajectory_order(key: str, prompt_rank: dict[str, int]) -> tuple[int, int, int]:
    """Where the trajectory ``<uid>_<session>_<index>`` goes in a training batch: its prompt's place in the step
    (``prompt_rank``: the order verl registered the step's prompts, the dataloader's), then its session, then its
    place among the session's outputs."""
    uid, session, index = key.rsplit("_", 2)
    return prompt_rank[uid], int(session), int(index)


@functools.cache
def _polling_replay_buffer() -> type:
    # imported on first use, not at the top (an ordering reason): importing verl's trainer resolves verl's platform
    # once per process, so at the top it would do so before this module registers the cpu platform (with
    # VERL_PLATFORM=cpu: "Unknown platform 'cpu'")
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    class PollingReplayBuffer(ReplayBuffer):
        """verl's sync ``ReplayBuffer``, polling for finished rollouts every `POLL_INTERVAL_S` seconds."""

        def __init__(self, trainer_mode: str, *args: Any, **kwargs: Any) -> None:
            if trainer_mode != "sync":
                raise ValueError(f"PollingReplayBuffer is verl's sync replay buffer; trainer mode is {trainer_mode!r}")
            if "filter_groups_metric" in kwargs:
                raise ValueError("PollingReplayBuffer does not take verl's DAPO group filtering")
            super().__init__(trainer_mode, *args, poll_interval=POLL_INTERVAL_S, **kwargs)

        def _materialize_batch(self, partition_id, selected_prompt_uids, partition_snapshot):
            """verl's batch in a fixed order (`trajectory_order`): TransferQueue lists the prompts of a step in the
            order they were put (the dataloader's), their trajectories in the order they finished."""
            meta = super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)
            rank = {uid: i for i, uid in enumerate(self.prompt_global_steps[partition_id])}
            pairs = sorted(zip(meta.keys, meta.tags, strict=True), key=lambda kt: trajectory_order(kt[0], rank))
            return dataclasses.replace(meta, keys=[k for k, _ in pairs], tags=[t for _, t in pairs])

    PollingReplayBuffer.__module__ = __name__
    return PollingReplayBuffer


# ----------------------------------------------------------------------------------------------------------------
# The agent loop

AGENT_LOOP = "bandpo_single_turn"  # its name in agent_loops.yaml (bandpo.verl.command.HF_AGENT_LOOP_CONFIG)


def sample_priority(index: Any, session_id: Any) -> int:
    """A sample's priority: its prompt's data index and its session (0 .. n-1), `hf_rollout.SAMPLE_STRIDE`."""
    session = int(session_id)
    if not 0 <= session < hf_rollout.SAMPLE_STRIDE:
        raise ValueError(f"session {session} out of range for the hf rollout's sample order")
    return int(index) * hf_rollout.SAMPLE_STRIDE + session


@functools.cache
def _agent_loop() -> type:
    # imported on first use (as the replay buffer): verl's agent loop module imports its trainer
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    class DeterministicSingleTurnAgentLoop(SingleTurnAgentLoop):
        """verl's single-turn agent loop with the sample's place in the step as its priority (`sample_priority`):
        under ``rollout.full_determinism`` verl's request id is ``det-<priority>``, the same in every run."""

        async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any):
            if "index" in kwargs and "session_id" in kwargs:
                priority = sample_priority(kwargs["index"], kwargs["session_id"])
            return await super().run(sampling_params, priority=priority, **kwargs)

    DeterministicSingleTurnAgentLoop.__module__ = __name__
    return DeterministicSingleTurnAgentLoop


def __getattr__(name: str) -> Any:
    """``PollingReplayBuffer`` and ``DeterministicSingleTurnAgentLoop`` are made on first use (verl's
    ``load_extern_object`` and Hydra read them by name), so that importing this module does not import verl's
    trainer."""
    if name == "PollingReplayBuffer":
        return _polling_replay_buffer()
    if name == "DeterministicSingleTurnAgentLoop":
        return _agent_loop()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The "hf" rollout registers itself when its module finishes importing (bandpo.verl.hf_rollout, last line): a Ray
# worker may import that module first (the actor's class), whose `import verl` then imports this module while
# hf_rollout is still half made, so a call from here would fail.
assert hf_rollout  # imported for its registration
