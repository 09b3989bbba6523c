"""The ``corpora`` command-line application (click)."""
