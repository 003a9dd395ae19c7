"""Running the Tinker conformance suite against third-party servers (docs/peers.md)."""
