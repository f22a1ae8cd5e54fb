"""flash-attn's import-only stand-in on the CUDA path (`FLASH_ATTN=stub bash scripts/setup_gpu.sh`): a run that needs
the real kernels is refused in one line naming the flag; a run without them goes on (`openrlhf_ext/kernels.py`).
This environment carries the stand-in (scripts/setup_cpu.sh installs it), as a stub GPU environment does."""

import sys
import types

import pytest

from openrlhf_copo.openrlhf_ext import cpu, driver, kernels
from tests_support import cli_exit_here, copo_argv

CUDA = ("--copo.device", "cuda", "--vllm.num_engines", "1")  # said outright: nothing is asked of this machine


def never(*_):
    raise AssertionError("the CPU path is not to be installed on the CUDA path")


@pytest.fixture
def on_cuda(monkeypatch):
    monkeypatch.setattr(cpu, "install", never)
    monkeypatch.setattr(cpu, "prepare_driver", never)


def test_this_environment_has_the_stand_in():
    assert kernels.flash_attn_is_stand_in()


@pytest.mark.parametrize("extra, flag", [
    (["--ds.packing_samples"], "--ds.packing_samples"),
    (["--ds.ring_attn_size", "2"], "--ds.ring_attn_size 2"),
    (["--train.dynamic_batch_enable", "--train.max_tokens_per_gpu", "4096"],
     "--train.dynamic_batch_enable (it turns on --ds.packing_samples)"),
    (["--ds.attn_implementation", "flash_attention_2"], "--ds.attn_implementation flash_attention_2"),
    (["--ds.attn_implementation", "paged|flash_attention_2"], "--ds.attn_implementation paged|flash_attention_2"),
])
def test_a_run_that_needs_the_kernels_is_refused_in_one_line_naming_the_flag(load_args, on_cuda, extra, flag):
    args = load_args(copo_argv(*CUDA, *extra))
    with pytest.raises(driver.DriverError) as e:
        driver.decide_device(args)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"the actors run on CUDA (--copo.device cuda), where {flag} needs flash-attn's compiled "
                              "kernels, and this environment has its import-only stand-in (FLASH_ATTN=stub)"), message
    assert "--ds.attn_implementation sdpa" in message


def test_a_run_without_them_goes_on(load_args, on_cuda):
    args = load_args(copo_argv(*CUDA))  # copo_argv: --ds.attn_implementation sdpa, no packing
    assert driver.decide_device(args).device == "cuda"


@pytest.mark.parametrize("implementation", ["flash_attention_3", "flash_attention_4", "kernels-community/vllm-flash-attn3",
                                            "kernels-community/flash-attn2", "sdpa"])
def test_an_attention_that_does_not_use_flash_attn_2_goes_on_with_the_stand_in(load_args, on_cuda, implementation):
    """transformers imports flash-attn 2's package for flash_attention_2 only (`kernels.FLASH_ATTN_2_IMPLEMENTATIONS`):
    flash_attention_3 imports flash_attn_interface, flash_attention_4 flash_attn.cute, a hub kernel comes through the
    `kernels` package. The stand-in stands in the way of none of them."""
    args = load_args(copo_argv(*CUDA, "--ds.attn_implementation", implementation))
    assert kernels.flash_attn_is_stand_in()
    assert driver.decide_device(args).device == "cuda"


def test_flash_attn_2_is_what_transformers_imports_flash_attn_for():
    """The list follows transformers' own: its loader imports `flash_attn` (flash-attn 2) under the name
    "flash_attention_2" only, and `flash_attn_interface` / `flash_attn.cute` / the kernels hub for the others."""
    import inspect

    from transformers import modeling_flash_attention_utils as fa

    source = inspect.getsource(fa._lazy_imports)
    assert 'implementation == "flash_attention_2" and is_fa2' in source
    assert "from flash_attn import flash_attn_func" in source
    assert 'implementation == "flash_attention_3"' in source and "from flash_attn_interface import" in source
    assert kernels.FLASH_ATTN_2_IMPLEMENTATIONS == ("flash_attention_2", "paged|flash_attention_2")


def test_with_a_real_flash_attn_packing_is_accepted(load_args, on_cuda, monkeypatch):
    args = load_args(copo_argv(*CUDA, "--ds.packing_samples"))
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))  # no stand-in mark
    assert not kernels.flash_attn_is_stand_in()
    assert driver.decide_device(args).device == "cuda"
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # not installed at all: not the stand-in either
    assert not kernels.flash_attn_is_stand_in()


def test_the_cpu_path_names_the_same_flag(load_args):
    """The CPU path's refusal asks the same function: dynamic batching is named, not the packing it turns on."""
    args = load_args(copo_argv("--vllm.sync_backend", "gloo", "--vllm.num_engines", "1",
                               "--train.dynamic_batch_enable", "--train.max_tokens_per_gpu", "4096"))
    assert args.ds.packing_samples  # OpenRLHF turned it on
    problems = cpu.cpu_problems(args)
    assert problems[0].startswith("--train.dynamic_batch_enable (it turns on --ds.packing_samples) needs "
                                  "flash-attention, which has no CPU kernels"), problems


def test_the_cli_refuses_in_one_line(capfd):
    code, _, err = cli_exit_here(copo_argv(*CUDA, "--ds.packing_samples"), capfd)
    assert code == 2, err[-2000:]
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in err, err[-2000:]
    assert errors[0].startswith("python -m openrlhf_copo.cli.train_ppo_ray: error: the actors run on CUDA "
                                "(--copo.device cuda), where --ds.packing_samples needs flash-attn's compiled kernels")
