"""A locally generated chat dataset: short instructions whose answers follow from the words.

Each example is one user turn and one assistant turn, e.g.::

    user:      Say "maple" in capitals.
    assistant: MAPLE

The tasks (capitals, plural, first letter, echo, double) are rules over the request's own
words, so a model that learns them answers held-out words it never saw in training, and the
held-out loss measures real learning rather than memorisation.
"""

from __future__ import annotations

import random

WORDS = [
    "maple",
    "river",
    "stone",
    "cloud",
    "apple",
    "tiger",
    "bread",
    "chair",
    "light",
    "grape",
    "ocean",
    "plant",
    "story",
    "music",
    "horse",
    "train",
    "lemon",
    "candle",
    "garden",
    "pencil",
    "rocket",
    "silver",
    "winter",
    "forest",
    "bottle",
    "window",
    "basket",
    "button",
    "planet",
    "castle",
    "violin",
    "pepper",
    "jacket",
    "ladder",
    "mirror",
    "turtle",
    "dragon",
    "copper",
]
TASKS = {
    "capitals": ('Say "{w}" in capitals.', lambda w: w.upper()),
    "plural": ('What is the plural of "{w}"?', lambda w: w + "s"),
    "first": ('What is the first letter of "{w}"?', lambda w: w[0]),
    "echo": ('Repeat the word "{w}".', lambda w: w),
    "double": ('Write "{w}" twice.', lambda w: f"{w} {w}"),
}


def make_chats(seed: int, n_train: int, n_test: int) -> tuple[list[tuple[str, str]], ...]:
    """(question, answer) pairs; held-out ones use words never seen in training."""
    rng = random.Random(seed)
    words = WORDS[:]
    rng.shuffle(words)
    held = len(words) // 4

    def chat(pool: list[str]) -> tuple[str, str]:
        template, answer = TASKS[rng.choice(sorted(TASKS))]
        word = rng.choice(pool)
        return template.format(w=word), answer(word)

    return [chat(words[held:]) for _ in range(n_train)], [chat(words[:held]) for _ in range(n_test)]
