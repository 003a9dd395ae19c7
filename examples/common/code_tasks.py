"""Small programming tasks graded by unit tests in the sandbox, and the check_solution tool.

A task asks for a one-line function (``Write f(x) that returns x plus 3.``) and carries its
unit tests. A response must put its program in a fenced ``python`` code block. Grading runs
the program and the tests in :mod:`localsession.sandbox` (a subprocess with time, CPU, memory
and file limits, no network, a temporary directory):

- reward 1.0 if every test passes, else 0.0;
- reward -0.1 if the response has no code block at all.

Two-turn mode: a first answer may end with the tool call line ``TOOL_CALL``; the program is
then run against the tests and the outcome comes back as a ``tool`` message in the model's
chat format, after which the model answers again. Only the last answer is rewarded.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from localsession.sandbox import SandboxLimits, SandboxResult, run_python

TOOL_CALL = "check_solution()"
NO_CODE_REWARD = -0.1
LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=256 * 2**20)
_BLOCK = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)
_OPS = {
    "plus": ("x + {k}", lambda x, k: x + k),
    "minus": ("x - {k}", lambda x, k: x - k),
    "times": ("x * {k}", lambda x, k: x * k),
}


@dataclass(frozen=True)
class CodeTask:
    prompt: str
    expression: str  # the reference body, e.g. "x + 3"
    tests: tuple[tuple[int, int], ...]  # (input, expected output)

    @property
    def solution(self) -> str:
        return code_block(f"def f(x):\n    return {self.expression}")


def code_block(program: str) -> str:
    return f"```python\n{program}\n```"


def make_task(rng: random.Random) -> CodeTask:
    word = rng.choice(sorted(_OPS))
    k = rng.randint(1, 9)
    template, fn = _OPS[word]
    inputs = rng.sample(range(0, 10), 3)
    return CodeTask(
        prompt=f"Write f(x) that returns x {word} {k}.",
        expression=template.format(k=k),
        tests=tuple((x, fn(x, k)) for x in inputs),
    )


def make_tasks(seed: int, n: int) -> list[CodeTask]:
    rng = random.Random(seed)
    return [make_task(rng) for _ in range(n)]


def wrong_solution(task: CodeTask, rng: random.Random) -> str:
    """A plausible mistake (wrong constant or operator), for two-turn warm-start data."""
    _, op, k = task.expression.split(" ")
    if rng.random() < 0.5:
        k = str((int(k) % 9) + 1)
    else:
        op = rng.choice([o for o in "+-*" if o != op])
    return code_block(f"def f(x):\n    return x {op} {k}")


def extract_code(response: str) -> str | None:
    """The last fenced code block's contents, or None."""
    blocks = _BLOCK.findall(response)
    return blocks[-1] if blocks else None


def test_program(code: str, task: CodeTask) -> str:
    """The solution followed by a harness that reports each failing test, then asserts."""
    cases = repr(list(task.tests))
    return (
        f"{code}\n\n"
        "_passed = 0\n"
        f"for _x, _want in {cases}:\n"
        "    try:\n"
        "        _got = f(_x)\n"
        "    except Exception as _e:\n"
        "        _got = type(_e).__name__\n"
        "    if _got == _want:\n"
        "        _passed += 1\n"
        "    else:\n"
        "        print(f'f({_x}) returned {_got!r}, expected {_want!r}')\n"
        f"print(f'{{_passed}}/{len(task.tests)} tests passed')\n"
        f"assert _passed == {len(task.tests)}\n"
    )


def grade(response: str, task: CodeTask) -> tuple[float, SandboxResult | None]:
    """(reward, sandbox result); the result is None when there was no code to run."""
    code = extract_code(response)
    if code is None:
        return NO_CODE_REWARD, None
    result = run_python(test_program(code, task), LIMITS)
    return (1.0 if result.ok else 0.0), result


def tool_feedback(result: SandboxResult | None) -> str:
    """What ``check_solution`` tells the model: the test report, or the error, in brief."""
    if result is None:
        return "no code block found"
    if result.timed_out or result.signal:
        return "the program did not finish"
    report = result.stdout.strip().splitlines()
    if report:
        return " ".join(report[-2:])[:120]
    errors = result.stderr.strip().splitlines()
    return (errors[-1] if errors else "error")[:120]
