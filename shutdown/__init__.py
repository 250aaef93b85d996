"""Broker and controller lifecycle state machines (controlled shutdown). Pure."""

PURE = True  # every module of this package is a pure core: no sockets, threads, clocks or files
