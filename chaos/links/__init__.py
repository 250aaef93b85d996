"""Link faults in userspace, for kernels without `tc netem` (chaos.nemeses.links names the packets).

    with LinkFaults.open() as faults:                       # chaos.links.install
        handle = faults.delay(matches, delay_ms=200, jitter_ms=20, seed=1)
        faults.remove(handle)
    # leaving the block removes every rule, class and proxy; so does `tidelog chaos clean`

- delay with jitter, and slow close: an iptables nat rule sends a link's new connections to a
  userspace proxy (chaos.links.proxy), which finds each one's original destination with
  SO_ORIGINAL_DST (as Toxiproxy does) and relays each direction's bytes after delay±jitter, in
  order (chaos.links.delay); the link's established connections are reset so they reconnect
  through it (`ss -K`).
- bandwidth: an HTB root qdisc on lo whose default class is unlimited, one class per shaped
  direction at the link's rate, u32 filters sending only the link's packets there.
- loss: iptables' `statistic --mode random` DROP rules in a chain of the run's own.

chaos.links.rules builds every command (pure); chaos.links.install runs them.
"""
