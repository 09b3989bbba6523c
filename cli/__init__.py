"""The ``corpora`` command-line application (click; the entry point is ``cli.main:main``)."""

from cli.quiet import hold_library_logs

# Before anything imports Beam: what libraries log while being imported waits for -v.
hold_library_logs()
