"""On-demand benchmarks (``make bench``); never part of ``make test``."""
