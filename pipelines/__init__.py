"""Apache Beam wiring for the ``corpora`` core: thin transforms and assembly."""
