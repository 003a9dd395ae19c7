"""Benchmarks: ratios against plain torch + peft, printed as one table by ``make bench``."""
