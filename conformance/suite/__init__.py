"""The conformance tests. Each uses only the public training-session API, through the
``backend`` fixture of :mod:`conformance.plugin`."""
