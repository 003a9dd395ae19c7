"""Arithmetic word problems in the GSM8K answer format, generated locally from templates.

A problem is one short sentence with two single-digit numbers and an operation (buying adds,
selling takes away), so that a byte-level model of half a million parameters can learn it in
CPU minutes. The reference solution shows the working, then the answer line, as GSM8K does::

    Q: Ana has 7 pears and sold 5. How many pears now?
    A: 7 - 5 = 2
       #### 2

``parse_answer`` reads the number on the ``####`` line that ends the response; ``math_reward``
is 1 for the right number and 0 otherwise (a missing, malformed or trailing-text answer line
scores 0, so a policy cannot pad its answer).

The ``chat`` style is for pretrained instruct models: two-digit addition asked in plain
words (``Compute 27 + 82. Reply with the result only.``), scored on the last number of the
reply. SmolLM2-135M-Instruct gets 10-15% of these right greedily out of the box (it answers
"20 + 21 = 32"), and about 2.5% of its samples at temperature 0.7 are right.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

# Every question has the same layout, with names and things of one length each, so the two
# numbers sit at fixed offsets: a two-layer model can then find them by position. (With
# free-length words and several layouts the tiny model tops out near 35% after SFT.)
NAMES = ["Ana", "Ben", "Cam", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Kim", "Lea", "Max"]
THINGS = ["pears", "cards", "coins", "books", "plums", "limes", "rocks", "bells", "shoes"]
ADD = ["{n} has {a} {t} and buys {b}. How many {t} now?"]
SUB = ["{n} has {a} {t} and sold {b}. How many {t} now?"]
_ANSWER = re.compile(r"####\s*(-?\d+)\s*$")  # the answer line ends the response
_NUMBER = re.compile(r"-?\d+")
CHAT_QUESTION = "Compute {a} + {b}. Reply with the result only."


@dataclass(frozen=True)
class MathProblem:
    question: str
    a: int
    b: int
    op: str  # "+" or "-"
    style: str = "gsm8k"  # or "chat": a plain question, the reply's last number is the answer

    @property
    def answer(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b

    @property
    def solution(self) -> str:
        """The reference response: the working, then the GSM8K answer line (``chat``: the
        number alone)."""
        if self.style == "chat":
            return str(self.answer)
        return f"{self.a} {self.op} {self.b} = {self.answer}\n#### {self.answer}"


def make_problem(rng: random.Random, top: int = 9) -> MathProblem:
    """One problem whose operands and answer lie in 1..``top`` (single digits by default)."""
    op = rng.choice("+-")
    if op == "+":
        a = rng.randint(1, top - 1)
        b = rng.randint(1, top - a)
    else:
        a = rng.randint(2, top)
        b = rng.randint(1, a - 1)
    template = rng.choice(ADD if op == "+" else SUB)
    question = template.format(n=rng.choice(NAMES), t=rng.choice(THINGS), a=a, b=b)
    return MathProblem(question, a, b, op)


def make_chat_problem(rng: random.Random) -> MathProblem:
    """Two-digit addition asked in plain words (the ``chat`` style)."""
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return MathProblem(CHAT_QUESTION.format(a=a, b=b), a, b, "+", style="chat")


def make_split(
    seed: int, n_train: int, n_test: int, style: str = "gsm8k"
) -> tuple[list[MathProblem], list[MathProblem]]:
    """Disjoint train and held-out problems (held-out questions never appear in training)."""
    if style not in ("gsm8k", "chat"):
        raise ValueError(f"unknown problem style {style!r}: expected 'gsm8k' or 'chat'")
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[MathProblem] = []
    while len(out) < n_train + n_test:
        p = make_chat_problem(rng) if style == "chat" else make_problem(rng)
        if p.question not in seen:
            seen.add(p.question)
            out.append(p)
    return out[:n_train], out[n_train:]


def parse_answer(text: str) -> int | None:
    """The integer on the final ``#### <n>`` line, or None when the response does not end so."""
    found = _ANSWER.search(text)
    return int(found.group(1)) if found else None


def last_number(text: str) -> int | None:
    """The last integer in ``text`` (the ``chat`` style's answer), or None."""
    found = _NUMBER.findall(text)
    return int(found[-1]) if found else None


def math_reward(text: str, problem: MathProblem) -> float:
    """1.0 for the right final number, else 0.0."""
    answer = last_number(text) if problem.style == "chat" else parse_answer(text)
    return 1.0 if answer == problem.answer else 0.0
