"""Import-only stand-in for vLLM, for the GPU test suite on a machine without vLLM (tests/gpu/run.sh puts it on
the path only when `import vllm` fails). OpenRLHF imports vLLM at module level; the suite never generates with
it. Every name raises when used, so nothing can quietly run on the stand-in."""

__version__ = "0.0.0+stand-in"
__openrlhf_copo_stand_in__ = True


def unavailable(qualname: str):
    """A class that raises on construction (and on any call of it), named ``qualname``."""

    class _Unavailable:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(f"{qualname} was used, but this is the import-only vLLM stand-in of the GPU test "
                               "suite (tests/gpu/stubs): install vLLM to run anything that generates")

        def __init_subclass__(cls, **kwargs):
            raise RuntimeError(f"{qualname}: the vLLM stand-in cannot be subclassed")

    _Unavailable.__name__ = _Unavailable.__qualname__ = qualname.rsplit(".", 1)[-1]
    return _Unavailable


SamplingParams = unavailable("vllm.SamplingParams")
LLM = unavailable("vllm.LLM")
