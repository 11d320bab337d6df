"""A hub model for the GPU profile: a ``huggingface_hub.snapshot_download`` into the suite's model folder layout.

CLI: ``python -m bandpo.models download --repo-id Qwen/Qwen2.5-3B-Instruct --out resources/models/qwen2.5-3b``
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import huggingface_hub

from bandpo.core.files import new_tmp_dir, publish_dir, write_json
from bandpo.core.provenance import weights_sha256

DEFAULT_ALLOW_PATTERNS: tuple[str, ...] = (
    "*.json",
    "*.safetensors",
    "*.txt",
    "*.model",
    "*.tiktoken",
    "*.jinja",
    "*.py",
)


def download_model(
    repo_id: str,
    out_dir: str | os.PathLike,
    revision: str | None = None,
    allow_patterns: Sequence[str] | None = DEFAULT_ALLOW_PATTERNS,
    token: str | bool | None = None,
    snapshot_download: Callable[..., str] | None = None,
) -> Path:
    """Download a hub model with ``huggingface_hub.snapshot_download`` (or the ``snapshot_download`` given, a
    stand-in for tests) into ``out_dir`` (same layout as a tiny model: config, weights, tokenizer files at the top
    level), atomically, with an ``info.json``."""
    if not repo_id or repo_id.count("/") != 1 or any(not part for part in repo_id.split("/")):
        raise ValueError(f"repo_id must look like 'owner/name', got {repo_id!r}")
    snapshot_download = snapshot_download or huggingface_hub.snapshot_download
    out_dir = Path(out_dir)
    tmp = new_tmp_dir(out_dir)
    t0 = time.time()
    try:
        kwargs: dict[str, Any] = {"repo_id": repo_id, "local_dir": str(tmp), "repo_type": "model"}
        if revision is not None:
            kwargs["revision"] = revision
        if allow_patterns is not None:
            kwargs["allow_patterns"] = list(allow_patterns)
        if token is not None:
            kwargs["token"] = token
        snapshot_download(**kwargs)
        if not (tmp / "config.json").exists():
            raise FileNotFoundError(f"{repo_id}: no config.json in the snapshot (allow_patterns={allow_patterns})")
        shutil.rmtree(tmp / ".cache", ignore_errors=True)  # huggingface_hub's local_dir metadata
        write_json(
            tmp / "info.json",
            {
                "kind": "hub",
                "repo_id": repo_id,
                "revision": revision,
                "allow_patterns": list(allow_patterns) if allow_patterns is not None else None,
                "download_seconds": round(time.time() - t0, 2),
                "weights_sha256": weights_sha256(tmp),
            },
        )
        publish_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
