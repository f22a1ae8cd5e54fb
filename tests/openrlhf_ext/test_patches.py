"""Patch 9: the tokenizer OpenRLHF sends with every prompt travels as its path, loaded once per process."""

import pickle

import pytest

from openrlhf_copo.embedded.models import tiny_qwen2
from openrlhf_copo.openrlhf_ext.patches import _TOKENIZERS, TokenizerByPath


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model"))
    tok.padding_side = "left"  # as OpenRLHF's get_tokenizer sets it for the actor
    return tok


def test_the_stand_in_pickles_small_and_loads_once_per_process(tokenizer):
    _TOKENIZERS.clear()
    sent = pickle.dumps(TokenizerByPath.of(tokenizer))
    assert len(sent) < 2_000 < 1_000_000 < len(pickle.dumps(tokenizer))  # a path and four settings, not 1.5 MB
    first, second = pickle.loads(sent), pickle.loads(sent)
    assert first is second and first is not tokenizer  # loaded once here, then kept
    assert (first.padding_side, first.pad_token, len(first)) == ("left", tokenizer.pad_token, len(tokenizer))
    text = "<|im_start|>user\nWhat is 25 + 4?<|im_end|>\n<|im_start|>assistant\n25 + 4 = 29<|im_end|>"
    ids = tokenizer(text=text, add_special_tokens=False)["input_ids"]
    assert first(text=text, add_special_tokens=False)["input_ids"] == ids  # what the rollout executor calls
    assert first.decode(ids, skip_special_tokens=False) == tokenizer.decode(ids, skip_special_tokens=False)


def test_a_tokenizer_changed_in_memory_is_refused_where_it_is_loaded(tokenizer):
    """A token added after loading is not in the folder: the engine would tokenize differently, so it refuses."""
    import copy

    changed = copy.deepcopy(tokenizer)
    changed.add_tokens(["<copo_extra>"])
    with pytest.raises(RuntimeError, match=r"has 49152 tokens, the trainer's has 49153"):
        pickle.loads(pickle.dumps(TokenizerByPath.of(changed)))


def test_a_tokenizer_without_a_local_folder_travels_as_itself(tokenizer):
    import copy

    hub = copy.deepcopy(tokenizer)
    hub.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"  # nothing on disk to load it from
    assert TokenizerByPath.of(hub) is hub
