from vllm import unavailable

PyNcclCommunicator = unavailable("vllm.distributed.device_communicators.pynccl.PyNcclCommunicator")
