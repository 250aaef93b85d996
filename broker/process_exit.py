"""Ending a node process once its state is durable, without tearing its heap down.

A broker holding 100,000 logs ends with a heap of ~800 MiB. Returning from `main` then makes the
interpreter free it object by object (module teardown, the final collection, every finalizer):
seconds of CPU between "Broker N stopped" and the process's exit that buy nothing, since the
kernel reclaims the memory and closes every descriptor of an exiting process at once. Kafka's
broker ends with `Exit.exit` after its shutdown hook for the same reason: nothing is owed once
the logs are closed and the clean-shutdown marker is written.

What the interpreter's exit would still do and this does first: flush and close every logging
handler (`logging.shutdown`, which atexit would run) and flush stdout and stderr. Nothing else
is registered to run at exit in a node: its pools and threads were stopped by its own shutdown.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_process(status: int) -> NoReturn:
    """Flush logging and the standard streams, then end the process with `status` at once."""
    try:
        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or gone (a launcher's pipe): nothing to keep
                pass
        os._exit(status)
