"""The test suite holds on a busy machine: no test asserts on wall-clock time.

A loaded machine stretches wall time, not work, so a bound on elapsed seconds belongs on
CPU time (``time.process_time()``, a child's ``resource.getrusage``) or on a ratio of two
timings taken in the same run. Deadlines that only stop a wait (``while time.monotonic()
< deadline``) are not assertions and are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
WALL_CLOCKS = {"time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns"}


def _is_wall_clock_call(node: ast.AST) -> bool:
    """``time.perf_counter()`` and the like (also ``perf_counter()`` imported bare)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in WALL_CLOCKS and getattr(func.value, "id", None) == "time"
    return isinstance(func, ast.Name) and func.id in WALL_CLOCKS - {"time"}


def _uses(node: ast.AST, names: set[str]) -> bool:
    return any(
        _is_wall_clock_call(n) or (isinstance(n, ast.Name) and n.id in names)
        for n in ast.walk(node)
    )


def wall_clock_assertions(source: str) -> list[int]:
    """Line numbers of the asserts in `source` that read the wall clock, directly or
    through a name computed from it (in the same function)."""
    if not any(clock in source for clock in ("perf_counter", "monotonic", "time(")):
        return []  # (most files: nothing to parse)
    lines = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        timed: set[str] = set()
        changed = True
        while changed:  # names computed from wall-clock readings, transitively
            changed = False
            for node in ast.walk(func):
                if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if _uses(node.value, timed):
                        for target in targets:
                            for name in ast.walk(target):
                                if isinstance(name, ast.Name) and name.id not in timed:
                                    timed.add(name.id)
                                    changed = True
        lines += [
            node.lineno
            for node in ast.walk(func)
            if isinstance(node, ast.Assert) and _uses(node.test, timed)
        ]
    return sorted(set(lines))


def test_the_checker_finds_wall_clock_assertions():
    bad = """
import time
def test_direct():
    started = time.perf_counter()
    work()
    assert time.perf_counter() - started < 10
def test_through_a_name():
    t0 = time.monotonic()
    work()
    elapsed = time.monotonic() - t0
    assert elapsed < 45, elapsed
"""
    good = """
import time, resource
def test_cpu():
    started = time.process_time()
    work()
    assert time.process_time() - started < 10
def test_deadline_only():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pass
    assert done()
"""
    assert wall_clock_assertions(bad) == [6, 11]
    assert wall_clock_assertions(good) == []


def test_no_test_asserts_on_wall_clock_time():
    found = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name
        if (lines := wall_clock_assertions(path.read_text(encoding="utf-8")))
    }
    assert not found, f"assertions on wall-clock time (use CPU time or a ratio): {found}"
