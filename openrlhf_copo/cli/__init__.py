"""Command-line entry points (thin: the work is in openrlhf_copo.openrlhf_ext).

Every `python -m openrlhf_copo.cli.<command>` imports this package first, before the command imports torch: here
pynvml's deprecation warning and DeepSpeed's guess of the CPU are silenced for the command and the processes it
starts (`openrlhf_copo.noise`), and nothing else."""

from openrlhf_copo.noise import quiet_entry_point

quiet_entry_point()
