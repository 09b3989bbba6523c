"""The output's lock: one build writes an output at a time
(:mod:`corpora.lock.output`; on an object store through :mod:`corpora.lock.leases`)."""

LOCK_NAME = "corpora.lock"  # the lock file's name in the output


class LockError(Exception):
    """The output's lock could not be taken or given back (one line)."""
