"""Metadata records, images and deltas, placement and the election/ISR rules. No I/O."""
