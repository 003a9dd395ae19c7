"""Parity with a recorded service: record, replay and snapshot-compare (docs/parity.md).

- :mod:`.normalise`: volatile values (ARNs, ids, session names, times, request ids) become
  placeholders; credentials and signatures never leave it;
- :mod:`.cassette`: the JSON-lines file one recording run writes, and its reader;
- :mod:`.compare`: a structural diff with numeric tolerances (replay misses, snapshots);
- :mod:`.proxy`: ``localsession record``, a recording proxy that re-signs with SigV4;
- :mod:`.replay`: the ASGI app that answers from a cassette (``serve --replay``,
  ``localsession.mock(replay=...)``).

Nothing here imports torch.
"""
