from vllm import unavailable

StatelessProcessGroup = unavailable("vllm.distributed.utils.StatelessProcessGroup")
