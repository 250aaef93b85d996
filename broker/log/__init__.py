"""Partition log storage: segments, indexes, checkpoints, recovery and retention."""
