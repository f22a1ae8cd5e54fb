"""Command-line entry points (thin: the work is in openrlhf_copo.openrlhf_ext)."""
