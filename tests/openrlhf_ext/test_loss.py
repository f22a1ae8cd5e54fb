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
    step_local, step_global = (loss.last_terms[k][0].item() for k in ("copo_loss_local", "copo_loss_global"))
    assert {loss.last_terms[k][1] for k in ("copo_loss_local", "copo_loss_global")} == {weight}

    # The same step in micro-batches of 1 and 2 and 3 responses, normalized as OpenRLHF's ppo_train does.
    total = {"dp_size": 1, "batch_num_tokens": mask.sum(), "global_batch_size": torch.tensor(8.0)}
    for split in ([[i] for i in range(8)], [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1, 2], [3, 4, 5], [6, 7]]):
        summed, logged = 0.0, torch.zeros(2)
        for rows in split:
            loss.global_advantages = weighted_global[rows]
            returned = loss(logp[rows], old[rows], local[rows], action_mask=mask[rows], **total)[0]
            summed += returned.item()
            n = mask[rows].sum() if token_level else len(rows)
            terms = loss.last_terms
            logged += n * torch.stack([terms["copo_loss_local"][0], terms["copo_loss_global"][0]])  # ppo_train's weighting
        # The optimized loss is unchanged: the micro-batches still sum to the step's loss.
        assert summed == pytest.approx(whole[0].item(), rel=1e-5)
        logged /= mask.sum() if token_level else 8
        assert logged.tolist() == pytest.approx([step_local, step_global], rel=1e-5)


def test_each_terms_push_on_the_sampled_tokens():
    """On-policy (ratio 1, nothing clipped), a token's push from a term is -A of that term (the gradient of the
    term's token mean times the token count). Two responses, 2 and 3 tokens:
    local A = [+1, -2], global A = [-0.5, -0.5]: pushes local [-1, -1 | 2, 2, 2], global [0.5, 0.5 | 0.5, 0.5, 0.5].
    Token means: local^2 (1 + 1 + 4 + 4 + 4) / 5 = 2.8; global^2 1.25 / 5 = 0.25; local x global
    (-0.5 - 0.5 + 1 + 1 + 1) / 5 = 0.4. So the global term's share of the push is 0.25 / 3.05 and the cosine
    0.4 / sqrt(2.8 x 0.25) = 0.478: here it pushes mostly with the local term."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    logp = torch.full((2, 3), -0.7, requires_grad=True)
    local = torch.tensor([[1.0], [-2.0]]).expand(2, 3) * mask
    loss = CopoPolicyLoss(PolicyLoss(), push_metrics=True)
    loss.global_advantages = torch.tensor([-0.5, -0.5])
    loss(logp, logp.detach(), local, action_mask=mask, dp_size=1, batch_num_tokens=mask.sum(),
         global_batch_size=torch.tensor(2.0))
    got = {k: v[0].item() for k, v in loss.last_terms.items() if k.startswith("copo_push")}
    assert got == pytest.approx({"copo_push_local_sq": 2.8, "copo_push_global_sq": 0.25, "copo_push_dot": 0.4})
    assert {loss.last_terms[k][1] for k in got} == {"token"}
    assert logp.grad is None  # measured on a copy: the model's gradient is untouched


def test_pushes_are_off_by_default_and_the_loss_is_the_same_either_way():
    """Without --copo.push_metrics the loss logs its two terms and the global clip ratio only, and returns exactly
    what it returns with the pushes on (they are measured on a detached copy)."""
    logp, old, local, weighted_global, mask = micro_batches()
    total = {"dp_size": 1, "batch_num_tokens": mask.sum(), "global_batch_size": torch.tensor(8.0)}
    out = {}
    for push in (False, True):
        loss = CopoPolicyLoss(PolicyLoss(), push_metrics=push)
        loss.global_advantages = weighted_global
        x = logp.clone().requires_grad_(True)
        returned = loss(x, old, local, action_mask=mask, **total)
        returned[0].backward()
        out[push] = (returned[0].item(), returned[1].item(), x.grad.clone(), set(loss.last_terms))
    assert out[False][3] == {"copo_loss_local", "copo_loss_global", "copo_clip_ratio_global"}
    assert out[True][3] == out[False][3] | {"copo_push_local_sq", "copo_push_global_sq", "copo_push_dot"}
    assert out[False][:2] == out[True][:2]
    assert torch.equal(out[False][2], out[True][2])


def test_the_clip_ratio_is_chosen_without_a_host_sync(monkeypatch):
    """The clip ratio is the global term's in a micro-batch with no local term (GO-Only), the local term's otherwise,
    chosen on the device: a `bool()` of a tensor (a host sync on a GPU) anywhere in the loss fails here."""
    logp, old, local, weighted_global, mask = micro_batches()

    def no_sync(self):
        raise AssertionError("host sync: bool() of a tensor in the loss")

    for advantages, term in ((local, 0), (torch.zeros_like(local), 1)):
        loss = CopoPolicyLoss(PolicyLoss(clip_eps_low=0.05, clip_eps_high=0.05))
        loss.global_advantages = weighted_global
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "__bool__", no_sync)
            clip_ratio = loss(logp, old, advantages, action_mask=mask)[1]
        expected = PolicyLoss(clip_eps_low=0.05, clip_eps_high=0.05)(
            logp, old, advantages if term == 0 else weighted_global.view(-1, 1).expand_as(mask) * mask,
            action_mask=mask)[1]
        assert clip_ratio.item() == pytest.approx(expected.item()) and expected.item() > 0
