# The GPU install's pins and order, sourced by scripts/setup_gpu.sh (which installs them) and
# scripts/check_gpu_install.sh (which resolves them with pip, without a GPU). requirements.txt holds the rest.
# When a pin here or in requirements.txt changes, rerun scripts/check_gpu_install.sh and commit its output
# (docs/gpu-install-check.md).

# Python versions openrlhf 0.11.2 has wheels for (on 3.13 pip says "No matching distribution").
GPU_PYTHON_MIN=3.10
GPU_PYTHON_MAX=3.12
# torch at vllm 0.29.0's pin, and flash-attn at openrlhf 0.11.2's, as requirements.txt lists them (run from the
# repository root). PyPI's torch 2.13.0 Linux wheels are built with CUDA 13: flash-attn compiles with that nvcc.
GPU_TORCH_SPEC=$(grep -E '^torch==' requirements.txt)
GPU_TORCH_CUDA_MAJOR=13
# What flash-attn 2.8.3's setup.py imports when built without isolation (it imports torch too).
GPU_BUILD_TOOLS=(psutil ninja packaging wheel "setuptools>=70,<81")
# flash-attn 2.8.3's release wheels stop at torch 2.8, so against torch 2.13 it compiles.
GPU_FLASH_ATTN_SPEC=$(grep -E '^flash-attn==' requirements.txt)
GPU_OPENRLHF_SPEC=$(grep -E '^openrlhf' requirements.txt | sed 's/\[[^]]*\]//')
# About this much memory per compile job (MAX_JOBS) while flash-attn builds.
GPU_FLASH_ATTN_GB_PER_JOB=9
