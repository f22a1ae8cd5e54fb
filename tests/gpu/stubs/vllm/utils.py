from vllm import unavailable

random_uuid = unavailable("vllm.utils.random_uuid")
