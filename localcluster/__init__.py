"""A local cluster on loopback, for people, tests, benches and chaos runs: the data dir's
layout (`cluster_layout`), each node's server.properties (`server_properties`), one node
process (`node_process`), the launcher that starts and stops them all (`launcher`) and the
replicas' log files on disk (`replica_files`).

Its own package so that `chaos` (whose nemeses act on these processes) needs nothing of
`tidelog`, whose command and pytest plugin run chaos: both import this instead (issue 26).
"""
