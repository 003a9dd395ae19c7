"""The console of ``localsession serve`` (docs/console.md): a read-only page at ``/console``
over both dialects' sessions, with each session's op timeline, metric curves, latest samples,
packages, and its trace as Chrome trace-event JSON.

- view.py: what the page shows, as JSON, read from the service and the Tinker dialect;
- console_routes.py: the page, its vendored assets (static/, no CDN), the JSON API and trace files;
- access.py: the key the console asks for under ``serve --auth``.
"""
