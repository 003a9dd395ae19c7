"""Sessions and their operations: one session's status machine and worker (``lifecycle``),
the table of sessions (``table``), operation records, the ordered training queue, the
sampling scheduler, the data plane (Execute*/Get*OperationResult) and session records on
disk (``persist``)."""
