"""Metadata records, images and deltas, placement and the election/ISR rules. No I/O."""

PURE = True  # every module of this package is a pure core: no sockets, threads, clocks or files
