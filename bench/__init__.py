"""Benchmarks: ratios against plain torch + peft, printed as tables by ``make bench`` (the
headline rows, bench/headline.py) and ``make bench-full`` (everything, bench/run_all.py)."""
