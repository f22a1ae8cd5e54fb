"""Training and evaluation read the same answer from the same sampled tokens.

The same token ids, stop token included (vLLM keeps it in the sampled ids), go
- through OpenRLHF 0.11.2's real `SingleTurnAgentExecutor` with our reward file (it decodes prompt + response
  with `skip_special_tokens=False` and calls `reward_func` from a thread), and
- through `evaluate`'s scoring of vLLM's text for those ids (special tokens skipped),
and must get the same verdict and the same answer id, which must also be the right verdict.

Tokenizer: SmolLM2-135M-Instruct's real one (ChatML, `<|im_end|>`, `<|endoftext|>`); for the Llama 3 and
Mistral templates, the same tokenizer with those templates' special tokens added as special tokens, so that
they encode to one id and decode as those tokenizers' do. The engine is a replay of fixed token ids (the
model's sampling is not what is tested here), built from vLLM's own output classes.
"""

import asyncio

import pytest
from vllm import SamplingParams
from vllm.outputs import CompletionOutput, RequestOutput

from openrlhf.utils.agent import SingleTurnAgentExecutor
from openrlhf_copo.cpu_demo.models import smollm2_instruct
from openrlhf_copo.evaluation.evaluate import Benchmark, score
from tests_support import REWARD_FILE

# name -> (prompt template around the question, end-of-turn token the model samples, extra special tokens)
TEMPLATES = {
    "chatml-im_end": ("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>", []),
    "qwen-endoftext": ("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", []),
    "llama3": ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
               ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
    "mistral": ("<s>[INST] {} [/INST]", "</s>", ["<s>", "</s>"]),
}

# (response as the model writes it, label, correct?)
RESPONSES = [
    ("3 - 10 = -7.\nAnswer: -7", "-7", True),
    ("Adding, the answer is 12.", "12", True),
    ("So the sum is \\boxed{\\frac{3}{4}}.", "0.75", True),
    ("**Answer:** 1,000", "1000", True),
    ("Compute: 6*7. Answer: **42**", "42", True),
    ("Let x = 5. Then the answer is $x = 5$.", "5", True),
    ("Answer: 13", "14", False),
    ("Answer: \\sqrt{8}", "2\\sqrt{2}", True),
    ("I think it is about nine", "9", False),  # no answer: its own id, on both sides
]


@pytest.fixture(scope="module")
def tokenizers():
    from transformers import AutoTokenizer

    path = smollm2_instruct()
    out = {}
    for name, (_, _, extra) in TEMPLATES.items():
        tok = AutoTokenizer.from_pretrained(path)
        if extra:
            tok.add_special_tokens({"additional_special_tokens": extra})
        out[name] = tok
    return out


class ReplayEngine:
    """Answers `generate` with fixed sampled ids, as OpenRLHF's vLLM engine actor answers its executor."""

    def __init__(self, ids):
        self.ids = ids

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = CompletionOutput(index=0, text="", token_ids=list(self.ids), cumulative_logprob=None, logprobs=None,
                               finish_reason="stop")
        return RequestOutput(request_id="0", prompt=None, prompt_token_ids=prompt_token_ids, prompt_logprobs=None,
                             outputs=[out], finished=True)


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_training_and_evaluation_agree_on_sampled_tokens(tokenizers, template):
    tok = tokenizers[template]
    prompt_format, stop, _ = TEMPLATES[template]
    stop_id = tok.convert_tokens_to_ids(stop)
    assert tok.convert_ids_to_tokens(stop_id) == stop and stop in tok.all_special_tokens
    executor = SingleTurnAgentExecutor(str(REWARD_FILE))  # loads math_reward.py by path, as in a real run

    for response, label, expected in RESPONSES:
        prompt = prompt_format.format("What is the result? End with 'Answer: <number>'.")
        ids = tok(response, add_special_tokens=False)["input_ids"] + [stop_id]
        trained = asyncio.run(executor.execute(prompt, label, SamplingParams(max_tokens=64), 512, tok,
                                               ReplayEngine(ids)))
        query = tok.decode(trained["observation_tokens"], skip_special_tokens=False)
        assert query.endswith(stop)  # what the reward really received

        # evaluate: vLLM's text of the same ids (special tokens skipped), scored by evaluate's own code
        vllm_text = tok.decode(ids, skip_special_tokens=True)
        evaluated = score(Benchmark("parity", None, 1, [{"prompt": prompt, "label": label}]), [[vllm_text]])
        sample = evaluated["samples"][0]

        logs = trained["extra_logs"]
        assert trained["reward"].item() == float(expected) == float(sample["correct"]), (template, response)
        has_answer = bool(logs["copo_has_answer"].item())
        assert has_answer == (sample["answer_id"] is not None), (template, response)
        if has_answer:
            assert int(logs["copo_answer_id"].item()) == sample["answer_id"], (template, response)
