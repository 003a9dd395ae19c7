"""Tests of the torch engine (``localsession.engine``) and base-model resolution."""
