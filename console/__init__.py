"""The web console (issue 32): pages served by every controller's admin server under /console/.

    console.views        pure: the topic list and its counts, the history strip, records as text/JSON/hex,
                         broker byte rates from /metrics text, a chaos run's live summary, query parsing
    console.kafka_reads  the shell's Kafka reads (ListOffsets, Fetch, DescribeConfigs, DescribeLogDirs)
    console.routes       the aiohttp routes: static files and the /console/api/ views
    console.chaos_serve  `tidelog chaos run --serve`: the Chaos page of a run, served while it runs
    console/static/      plain HTML, CSS and JS written here (no framework, nothing from a CDN)

Writes are never made here: the pages call the admin API's own endpoints (/v1/topics, /v1/groups/...)
with the token the operator typed, so a console action is exactly the CLI's.
"""
