"""Tests of the ``localsession`` command line, run as a user runs it: subprocesses."""
