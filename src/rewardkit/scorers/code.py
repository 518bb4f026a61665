"""Code generation (CodeContests, APPS, TACO, LiveCodeBench, MBPP): run the solution against test cases.

The solution is the last ```python fenced block of the response (else the last untagged block, else
the whole response). ``ground_truth`` (a dict/list, or the same as JSON text) holds the tests:

* ``{"inputs": [...], "outputs": [...]}``: stdin/stdout tests; outputs compare line by line,
  each line stripped, trailing blank lines ignored;
* the same with ``"fn_name"`` (APPS call-based): ``inputs[i]`` is the argument list of
  ``fn_name`` (a top-level function or a ``Solution`` method); results compare as JSON values;
* a list of assert statements, or one string of Python holding asserts (each top-level
  ``assert`` is a test; the other statements are set-up run before each).

Every test runs in its own sandboxed process (:mod:`rewardkit.scorers.sandbox`), or on a
SandboxFusion server when ``sandbox_fusion={"url": ...}`` is given. The score is the fraction of
tests passed.
"""

from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewardkit.result import SampleResult
from rewardkit.scorers._text import truncate
from rewardkit.scorers.sandbox import Limits, RunResult, SandboxUnavailable, run_python

_PY_TAGS = ("python", "py", "python3")
_RESULT_MARK = "__REWARDKIT_RESULT__"


def extract_code(response: str) -> str:
    """The Python code in a response: the last ```python block, else the last untagged block, else everything.

    An unclosed final block (a truncated response) counts. Linear time: fences are found with ``str.split``.
    """
    pieces = (response or "").split("```")
    if len(pieces) < 2:
        return response or ""
    blocks = pieces[1::2]
    tagged, untagged = None, None
    for block in blocks:
        first, _, rest = block.partition("\n")
        tag = first.strip().lower()
        if tag in _PY_TAGS:
            tagged = rest
        elif tag == "":
            untagged = rest
    if tagged is not None:
        return tagged
    if untagged is not None:
        return untagged
    return response


@dataclass
class TestCase:
    """One test: a program to run, its stdin, and how to judge the run."""

    program: str
    stdin: str
    expected: Any
    kind: str  # "stdio" | "assert" | "call"
    label: str


def _load(ground_truth: Any) -> Any:
    if isinstance(ground_truth, str):
        text = ground_truth.strip()
        if text[:1] in "{[":
            try:
                return json.loads(text)
            except ValueError:
                pass
    return ground_truth


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


_CALL_HARNESS = """

def __rewardkit_call():
    import json as _json
    _args = _json.loads({args!r})
    _name = {fn!r}
    _g = globals()
    if _name in _g and callable(_g[_name]):
        _fn = _g[_name]
    elif "Solution" in _g:
        _fn = getattr(_g["Solution"](), _name)
    else:
        raise NameError("no function " + _name)
    if not isinstance(_args, list):
        _args = [_args]
    _out = _fn(*_args)
    try:
        _text = _json.dumps(_out)
    except TypeError:
        _text = _json.dumps(repr(_out))
    print("\\n{mark}" + _text)

__rewardkit_call()
"""


def _split_asserts(source: str) -> tuple[str, list[str]]:
    """``(set-up, [assert statements])`` from a string of test code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "", [source]
    lines = source.splitlines(keepends=True)

    def text(node: ast.stmt) -> str:
        return "".join(lines[node.lineno - 1 : node.end_lineno])

    setup = [text(n) for n in tree.body if not isinstance(n, ast.Assert)]
    asserts = [text(n) for n in tree.body if isinstance(n, ast.Assert)]
    if not asserts:  # e.g. a check() function called at the end: the whole thing is one test
        return "", [source]
    return "".join(setup), asserts


def _assert_test(code: str, test: str, label: str) -> TestCase:
    """An assert test that passes only if the program reaches its end.

    Exiting early with status 0 (``sys.exit(0)``, ``os._exit(0)``: a known reward hack) must not
    pass, so the program echoes a random token, read from stdin before the solution runs, after
    the last assert; the run passes only if the token comes back.
    """
    token = secrets.token_hex(16)
    future, body = _hoist_future_imports(code)
    program = (
        f"{future}import sys as _rk_sys; _rk_token = _rk_sys.stdin.readline().strip(); del _rk_sys\n"
        f"{body}\n\n{test}\n"
        "print('\\n' + _rk_token)\n"
    )
    return TestCase(program, token + "\n", token, "assert", label)


def _hoist_future_imports(code: str) -> tuple[str, str]:
    """``from __future__`` lines must come first: move them above the harness line."""
    future: list[str] = []
    body: list[str] = []
    for line in code.splitlines(keepends=True):
        (future if line.startswith("from __future__ import") else body).append(line)
    return "".join(line if line.endswith("\n") else line + "\n" for line in future), "".join(body)


def build_tests(code: str, ground_truth: Any) -> list[TestCase]:
    """Turn a solution and ``ground_truth`` into runnable tests (see the module doc for the accepted shapes)."""
    tests = _load(ground_truth)
    if isinstance(tests, dict):
        inputs, outputs = tests.get("inputs"), tests.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list):
            if "test" in tests or "tests" in tests:
                return build_tests(code, tests.get("tests", tests.get("test")))
            raise ValueError("code: ground_truth dict needs 'inputs' and 'outputs' lists")
        if len(inputs) != len(outputs):
            raise ValueError(f"code: {len(inputs)} inputs but {len(outputs)} outputs in ground_truth")
        fn_name = tests.get("fn_name")
        if fn_name:
            return [
                TestCase(
                    code + _CALL_HARNESS.format(args=json.dumps(i), fn=str(fn_name), mark=_RESULT_MARK),
                    "",
                    o,
                    "call",
                    f"test {n}",
                )
                for n, (i, o) in enumerate(zip(inputs, outputs, strict=True))
            ]
        return [
            TestCase(code, _as_text(i), _as_text(o), "stdio", f"test {n}")
            for n, (i, o) in enumerate(zip(inputs, outputs, strict=True))
        ]
    if isinstance(tests, str):
        setup, asserts = _split_asserts(tests)
        return [
            _assert_test(code, f"{setup}\n{a}", f"test {n}: {truncate(a.strip(), 80)}")
            for n, a in enumerate(asserts)
        ]
    if isinstance(tests, Sequence) and all(isinstance(t, str) for t in tests):
        return [_assert_test(code, t, f"test {n}: {truncate(t.strip(), 80)}") for n, t in enumerate(tests)]
    raise ValueError(
        "code: ground_truth must be {'inputs': [...], 'outputs': [...]} (optionally with 'fn_name'), "
        f"a list of assert strings, or a string of asserts; got {type(tests).__name__}"
    )


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines()]


def _normalise(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    return value


def judge(test: TestCase, run: RunResult) -> str | None:
    """``None`` if the run passed ``test``, else a short reason."""
    if run.status != "ok":
        return run.describe()
    if test.kind == "assert":
        last = next((ln.strip() for ln in reversed(run.stdout.splitlines()) if ln.strip()), "")
        return None if last == test.expected else "exited before running every assert"
    if test.kind == "stdio":
        if _lines(run.stdout) == _lines(test.expected):
            return None
        return f"wrong answer: expected {truncate(test.expected.strip(), 80)!r}, got {truncate(run.stdout.strip(), 80)!r}"
    marker_line = next((ln for ln in reversed(run.stdout.splitlines()) if ln.startswith(_RESULT_MARK)), None)
    if marker_line is None:
        return "no result returned"
    try:
        got = _normalise(json.loads(marker_line[len(_RESULT_MARK) :]))
    except ValueError:
        return "unreadable result"
    expected = _normalise(test.expected)
    # APPS wraps call-based expected values in a one-element list.
    if got == expected or (isinstance(expected, list) and len(expected) == 1 and got == expected[0]):
        return None
    return f"wrong answer: expected {truncate(json.dumps(test.expected), 80)}, got {truncate(json.dumps(got), 80)}"


async def _run(
    test: TestCase, limits: Limits, sandbox_fusion: dict | None, sandbox: dict | None = None
) -> RunResult:
    if sandbox_fusion and sandbox_fusion.get("url"):
        from rewardkit.scorers.sandbox_fusion import run_python_remote

        return await run_python_remote(
            test.program,
            test.stdin,
            url=sandbox_fusion["url"],
            timeout_s=limits.timeout_s,
            memory_limit_mb=int(sandbox_fusion.get("memory_limit_mb") or limits.memory_mb),
            max_concurrent=int(
                sandbox_fusion.get("max_concurrency") or sandbox_fusion.get("max_concurrent") or 64
            ),
        )
    return await run_python(test.program, test.stdin, limits, isolation=sandbox)


async def compute_score(
    response: str,
    ground_truth: Any,
    timeout_s: float = 4.0,
    total_timeout_s: float | None = 20.0,
    memory_mb: int = 1024,
    max_tests: int | None = None,
    stop_on_first_failure: bool = False,
    sandbox_fusion: dict | None = None,
    sandbox: dict | None = None,
) -> dict[str, Any] | SampleResult:
    """Run the response's Python solution against the tests in ``ground_truth``.

    ``timeout_s`` is the wall deadline of each test; once the tests have run for ``total_timeout_s``
    in all (time spent waiting for a free sandbox does not count), the rest count as failed. ``memory_mb`` caps each test's address space. ``max_tests`` keeps
    only the first tests; ``stop_on_first_failure`` skips the rest after a failure (they count as
    failed). ``sandbox_fusion`` (``{"url", "max_concurrency", "memory_limit_mb"}``) runs the tests on a
    SandboxFusion server instead of locally. ``sandbox`` (``{"mode", "allow_unconfined", "disk_mb"}``,
    the ``reward.sandbox`` config) sets the local isolation; when it cannot be had here the sample is
    ``failed`` with reason ``sandbox_unavailable``, never run with less.

    Returns ``{"score": passed / total, "acc": all passed, "passed", "total", "first_failure": the first failure's reason or None}``,
    or a ``failed`` :class:`~rewardkit.result.SampleResult` (reason ``sandbox_unavailable``).
    """
    code = extract_code(response or "")
    tests = build_tests(code, ground_truth)
    if max_tests is not None:
        tests = tests[:max_tests]
    if not tests:
        raise ValueError("code: ground_truth holds no tests")
    total = len(tests)
    if not code.strip():
        return {"score": 0.0, "acc": False, "passed": 0, "total": total, "first_failure": "empty solution"}
    disk_mb = int((sandbox or {}).get("disk_mb") or Limits.disk_mb)
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, disk_mb=disk_mb)
    passed = 0
    first_error: str | None = None
    spent = 0.0  # seconds spent running tests; time queued for a sandbox slot does not count
    for test in tests:
        if total_timeout_s is not None and spent > total_timeout_s:
            first_error = first_error or f"{test.label}: not run, total_timeout_s={total_timeout_s} exceeded"
            break
        try:
            run = await _run(test, limits, sandbox_fusion, sandbox)
        except SandboxUnavailable as e:
            return SampleResult.failed("sandbox_unavailable", str(e))
        spent += run.wall_s
        reason = judge(test, run)
        if reason is None:
            passed += 1
            continue
        first_error = first_error or f"{test.label}: {reason}"
        if stop_on_first_failure:
            break
    return {
        "score": passed / total,
        "acc": passed == total,
        "passed": passed,
        "total": total,
        "first_failure": truncate(first_error, 300),
    }
