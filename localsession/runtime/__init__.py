"""The service in-process, no torch, by resource: ``sessions/`` (sessions and their
operations), ``packages/`` (the model registry and its artifacts), ``models/`` (catalog,
sources, hub) and ``chat/`` (OpenAI chat completions), behind the front ``service.py``."""
