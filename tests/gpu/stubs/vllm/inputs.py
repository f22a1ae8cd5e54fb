from vllm import unavailable

TokensPrompt = unavailable("vllm.inputs.TokensPrompt")
