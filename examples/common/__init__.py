"""Shared pieces of the examples: task generators, reward parsers, and the loop plumbing.

- :mod:`common.math_tasks`: GSM8K-style arithmetic word problems with ``#### <n>`` answers;
- :mod:`common.code_tasks`: small "write f(x)" tasks graded by unit tests in the sandbox;
- :mod:`common.loop`: command-line options, the service client, datums, sampling, evaluation.

Everything here uses only the public client API, so the examples run on the real service after
changing one import line in each example.
"""
