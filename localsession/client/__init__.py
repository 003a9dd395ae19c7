"""The client layer: the SDK's three clients over a ``Backend``; no torch, no HTTP."""
