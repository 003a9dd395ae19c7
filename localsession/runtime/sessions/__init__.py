"""Sessions and their operations: one session's status machine (``lifecycle``), who runs
its ops, the worker or a waiting caller (``runner``), what each op does (``run_op``), which
packages a session may load (``package_fit``), the table of sessions (``table``), operation
records, the ordered training queue, the sampling scheduler, the data plane
(Execute*/Get*OperationResult) and session records on disk (``persist``)."""
