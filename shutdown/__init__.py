"""Broker and controller lifecycle state machines (controlled shutdown). Pure."""
