"""The package's modules form layers: no import circle, counting the imports inside functions too (Python
tolerates those, a reader cannot layer them)."""

import ast
from pathlib import Path

import openrlhf_copo

PACKAGE = Path(openrlhf_copo.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict:
    """module -> the package modules it imports anywhere in its source."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import mod` imports pkg.mod when that is a module, else a name of pkg
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_in_the_package():
    graph = import_graph()
    assert "openrlhf_copo.openrlhf_ext.advantages" in graph and graph["openrlhf_copo.openrlhf_ext.advantages"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_core_imports_nothing_of_the_package_or_of_openrlhf():
    source = (PACKAGE / "core.py").read_text()
    assert not import_graph()["openrlhf_copo.core"] and "openrlhf." not in source


def test_the_evaluation_does_not_reach_up_into_the_openrlhf_glue():
    """`openrlhf_copo.evaluation` (also run on its own, `cli.evaluate`) takes what it shares with the training
    pipeline from the package's own level (`vllm_cpu`, `contract`, `rewards`), never from `openrlhf_ext`."""
    upward = {(m, t) for m, targets in import_graph().items() if m.startswith("openrlhf_copo.evaluation")
              for t in targets if t.startswith("openrlhf_copo.openrlhf_ext")}
    assert not upward, upward


def test_the_run_imports_nothing_of_the_probe():
    """The probe (`openrlhf_copo.probe`, `cli.probe`) is a client of the run: it starts one and reads what its
    advantage step wrote (`openrlhf_ext.probe_step`). Nothing under `openrlhf_ext` imports the probe back."""
    upward = {(m, t) for m, targets in import_graph().items() if m.startswith("openrlhf_copo.openrlhf_ext")
              for t in targets if t in ("openrlhf_copo.probe", "openrlhf_copo.cli.probe")}
    assert not upward, upward
