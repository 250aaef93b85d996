"""quorum.live_voters: the HTTP API's live view of the voters, read from the voter set."""

from __future__ import annotations

from quorum.live_voters import ApiAddresses, QuorumIds
from quorum.voter_set import ZERO_DIRECTORY_ID as ZERO, VoterEntry, VoterSet

VOTERS = VoterSet((VoterEntry(1, ZERO, "127.0.0.1:9093"), VoterEntry(2, ZERO, "127.0.0.2:9093", "127.0.0.2:8080"),
                   VoterEntry(3, ZERO, "127.0.0.3:9093")))
STATIC_API = {1: "127.0.0.1:8080", 2: "127.0.0.2:7070", 3: "127.0.0.3:8080"}


class CountedVoters:
    """The voter set as MetadataLog.voter_set hands it out, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> VoterSet:
        self.reads += 1
        return VOTERS


def test_the_api_addresses_are_the_voter_sets_with_the_static_config_as_fallback() -> None:
    apis = ApiAddresses(CountedVoters(), STATIC_API, me=1)
    assert dict(apis) == {1: "127.0.0.1:8080", 2: "127.0.0.2:8080", 3: "127.0.0.3:8080"}
    assert dict(QuorumIds(CountedVoters())) == {"127.0.0.1:9093": 1, "127.0.0.2:9093": 2, "127.0.0.3:9093": 3}


def test_listing_the_voters_reads_the_voter_set_once() -> None:
    # every broker's metadata fetch lists them: Mapping's items() read the set again per key
    voters = CountedVoters()
    assert sorted(ApiAddresses(voters, STATIC_API, me=1).items()) == [
        (1, "127.0.0.1:8080"), (2, "127.0.0.2:8080"), (3, "127.0.0.3:8080")]
    assert voters.reads == 1
    ids = CountedVoters()
    assert dict(QuorumIds(ids).items()) == {"127.0.0.1:9093": 1, "127.0.0.2:9093": 2, "127.0.0.3:9093": 3}
    assert ids.reads == 1
