"""The service in-process: sessions, ordered training queues, the sampling scheduler; no torch."""
