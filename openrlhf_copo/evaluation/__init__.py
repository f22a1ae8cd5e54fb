"""Evaluation as in the paper's tables: sampling k responses per prompt, mean@k, maj@k, pass@k."""
