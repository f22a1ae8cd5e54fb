"""The thin layer between COPO's math (`openrlhf_copo.core`) and OpenRLHF 0.11.x.

Every place this project touches OpenRLHF is in this folder:
- `config.py`: the `--copo.*` flags, the estimator choices and the settings COPO refuses;
- `advantages.py`: COPO in place of group normalization in the experience maker;
- `loss.py`: the two-term COPO loss over OpenRLHF's PolicyLoss;
- `runtime_patches/`: installs the above into openrlhf's classes at run time, one module per concern (the map: its
  `__init__.py`; the top-level `patches/` holds the same glue as source diffs for a fork);
- `driver.py`: the driver's steps, in order (flags, refusals, resume guard, preflight, device, Ray start, the end);
- `device.py`, `failure.py`: where the actors run (`--copo.device`), and the one line a failed run ends on;
- `worker_hook.py`: Ray's worker hook, which gets them into every Ray worker without touching CUDA;
- `cpu.py`, `preflight.py`: the CPU device path, and the driver's checks of the inputs.
"""
