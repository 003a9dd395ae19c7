"""The ``localsession`` command line: ``demo`` and ``models``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localsession", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a real SFT loop on a built-in model")
    demo.add_argument("--model", default="localsession/tiny")
    demo.add_argument("--steps", type=int, default=60)
    demo.add_argument("--learning-rate", type=float, default=5e-3)
    commands.add_parser("models", help="list the base models a session can start on")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from localsession.demo import run

        result = run(args.model, args.steps, args.learning_rate)
        return 0 if result.loss_after < result.loss_before else 1
    from localsession.runtime.models import list_base_models

    for name in list_base_models():
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
