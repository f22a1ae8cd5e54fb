"""The COPO loss wrapper around OpenRLHF's own PolicyLoss: what it logs for each term.

OpenRLHF divides each micro-batch's loss by the whole optimizer step's token (or sample) count, so that the
micro-batches sum to one mean. The logged terms must be the micro-batch's own means, so that ppo_train's token
(sample) weighting turns them into the step's exact mean, however the responses are split into micro-batches."""

import pytest
import torch
from openrlhf.models.loss import PolicyLoss

from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss


def micro_batches():
    """8 responses of uneven length (2..9 tokens), off-policy enough that some tokens clip."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([2, 9, 3, 8, 4, 7, 5, 6])
    mask = (torch.arange(9).view(1, -1) < lengths.view(-1, 1)).float()
    logp = -torch.rand(8, 9, generator=g)
    old = logp + 0.3 * torch.randn(8, 9, generator=g)
    local = torch.randn(8, 1, generator=g).expand(8, 9) * mask
    weighted_global = torch.randn(8, generator=g)
    return logp, old, local, weighted_global, mask


@pytest.mark.parametrize("token_level", [True, False])
def test_logged_terms_are_exact_step_means_for_any_micro_batching(token_level):
    logp, old, local, weighted_global, mask = micro_batches()
    loss = CopoPolicyLoss(PolicyLoss(token_level_loss=token_level))
    weight = "token" if token_level else "sample"
    assert loss.term_weight == weight

    # The whole step as one micro-batch, no step normalizers: the terms are the step's means.
    loss.global_advantages = weighted_global
    whole = loss(logp, old, local, action_mask=mask)
    step_local, step_global, _ = (t.item() for t in loss.last_terms)

    # The same step in micro-batches of 1 and 2 and 3 responses, normalized as OpenRLHF's ppo_train does.
    total = {"dp_size": 1, "batch_num_tokens": mask.sum(), "global_batch_size": torch.tensor(8.0)}
    for split in ([[i] for i in range(8)], [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1, 2], [3, 4, 5], [6, 7]]):
        summed, logged = 0.0, torch.zeros(2)
        for rows in split:
            loss.global_advantages = weighted_global[rows]
            returned = loss(logp[rows], old[rows], local[rows], action_mask=mask[rows], **total)[0]
            summed += returned.item()
            n = mask[rows].sum() if token_level else len(rows)
            logged += n * torch.stack(loss.last_terms[:2])  # what ppo_train's weighting does
        # The optimized loss is unchanged: the micro-batches still sum to the step's loss.
        assert summed == pytest.approx(whole[0].item(), rel=1e-5)
        logged /= mask.sum() if token_level else 8
        assert logged.tolist() == pytest.approx([step_local, step_global], rel=1e-5)
