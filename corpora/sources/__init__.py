"""Source readers: one module per upstream format.

Each reader turns the raw lines (or rows) of one input file into
:class:`~corpora.record.Document` records or :class:`~corpora.record.Drop`
entries with a reason; none of them raises on a bad record.
"""
