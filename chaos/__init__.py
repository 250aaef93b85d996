"""Nemesis, workloads, histories and checkers for fault-injection scenarios."""
