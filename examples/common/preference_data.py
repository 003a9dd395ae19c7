"""Preference data, generated locally: a well-formed sentence over the same words scrambled.

Each pair answers one request (``Describe the lamp.``) with the same bytes twice: the chosen
response in order (``The lamp is bright.``), the rejected one with its words shuffled
(``bright lamp The is.``). Both have the same length and the same bytes, so the base model
has no built-in bias between them (it starts near chance), while the preference is
consistent and generalises to held-out subjects.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SUBJECTS = [
    "lamp",
    "river",
    "garden",
    "train",
    "cake",
    "song",
    "city",
    "window",
    "road",
    "cloud",
    "chair",
    "forest",
    "bridge",
    "coat",
    "clock",
    "boat",
    "shell",
    "field",
    "house",
    "storm",
    "market",
    "candle",
    "mirror",
    "ladder",
]
ADJECTIVES = ["bright", "quiet", "long", "warm", "old", "small", "calm", "tall", "green", "soft"]
REQUESTS = ["Describe the {s}.", "Tell me about the {s}.", "What is the {s} like?"]


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str


def make_pairs(seed: int, n_train: int, n_test: int) -> tuple[list[PreferencePair], ...]:
    """Train and held-out pairs; held-out pairs use subjects never seen in training."""
    rng = random.Random(seed)
    subjects = SUBJECTS[:]
    rng.shuffle(subjects)
    held = max(1, len(subjects) // 4)

    def pair(subject: str) -> PreferencePair:
        adjective = rng.choice(ADJECTIVES)
        sentence = f"The {subject} is {adjective}."
        words = sentence.rstrip(".").split(" ")
        scrambled = words[:]
        while scrambled == words:
            rng.shuffle(scrambled)
        return PreferencePair(
            prompt=rng.choice(REQUESTS).format(s=subject),
            chosen=sentence,
            rejected=" ".join(scrambled) + ".",
        )

    train = [pair(rng.choice(subjects[held:])) for _ in range(n_train)]
    test = [pair(rng.choice(subjects[:held])) for _ in range(n_test)]
    return train, test
