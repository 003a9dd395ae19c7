"""``localsession serve``: the wire-compatible HTTP server for the unmodified SageMaker SDK.

One server answers both services the SDK talks to (the ``sagemaker`` control plane, model
registry and Hub, and the ``sagemakertrainingsessionruntime`` runtime), plus S3 calls on the
model packages' artifacts (``/s3``, server/s3.py), over the same runtime the in-process
clients use. :class:`~localsession.server.hosting.ServerThread` runs it in the
background; :func:`~localsession.server.serve.serve` runs it in the foreground.
"""
