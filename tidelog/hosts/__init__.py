"""Nodes as separate hosts: network namespaces here (`netns`), a cluster of them (`cluster`), and
one node's config and storage for a real machine (`tidelog format`, tidelog.cli_format)."""
