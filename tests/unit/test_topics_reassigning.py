"""TopicsImage.reassigning (metadata/image.py), kept by metadata/delta.py's replay, and what reads
it instead of every partition: quorum/reassignment_control.complete_reassignments and
metadata/reassignment.list_reassignments.

The invariant: replaying any records, in any split of batches, leaves the same `reassigning` (and
`by_name`) that one pass over the resulting image computes, and the same image as replaying
them all at once. A seeded random walk of topic creations, reassignments, completions,
cancellations, partition replacements and topic removals checks it after every batch.
"""

from __future__ import annotations

import random

import pytest

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage, TopicsImage
from metadata.reassignment import list_reassignments
from metadata.records import Partition, PartitionChange, Record, RegisterBroker, RemoveTopic, Topic
from metadata.snapshot import decode_snapshot, encode_snapshot
from quorum.reassignment_control import complete_reassignments

BROKERS = (1, 2, 3, 4, 5)


def _brokers() -> MetadataImage:
    return apply(EMPTY_IMAGE, enumerate(RegisterBroker(b, f"inc-{b}", (), fenced=False) for b in BROKERS))


def _assert_derived_maps_agree(image: MetadataImage) -> None:
    """What replay kept equals what one pass over the image finds."""
    recomputed = TopicsImage(image.topics.by_id)
    assert image.topics.reassigning == recomputed.reassigning
    assert dict(image.topics.by_name) == dict(recomputed.by_name)
    for topic_id, topic in image.topics.by_id.items():
        assert all(p.topic_id == topic_id and p.partition_id == i for i, p in topic.partitions.items())


def _random_record(rng: random.Random, image: MetadataImage, serial: list[int]) -> Record:
    """One valid record for `image`: mostly partition changes that start, grow or end reassignments."""
    topics = sorted(image.topics.by_id)
    roll = rng.random()
    if not topics or roll < 0.08:
        serial[0] += 1
        return Topic(f"t{serial[0]}", f"id-{serial[0]}")
    topic_id = rng.choice(topics)
    partitions = image.topics.by_id[topic_id].partitions
    if roll < 0.12:
        return RemoveTopic(topic_id)
    if not partitions or roll < 0.3:
        replicas = tuple(rng.sample(BROKERS, 3))
        adding = (replicas[0],) if rng.random() < 0.3 else ()
        return Partition(topic_id, rng.randrange(len(partitions) + 1), replicas, replicas[1:], leader=replicas[1],
                         adding_replicas=adding)
    partition_id = rng.choice(sorted(partitions))
    partition = partitions[partition_id]
    if partition.is_reassigning:  # complete or cancel it
        keep = partition.original_replicas if rng.random() < 0.5 else partition.target_replicas
        return PartitionChange(topic_id, partition_id, replicas=keep, isr=keep, leader=keep[0],
                               adding_replicas=(), removing_replicas=())
    spare = [b for b in BROKERS if b not in partition.replicas]
    if not spare or rng.random() < 0.3:  # a change that leaves the reassignment state alone
        return PartitionChange(topic_id, partition_id, isr=partition.replicas)
    new = rng.choice(spare)
    gone = partition.replicas[-1]
    return PartitionChange(topic_id, partition_id, replicas=(*partition.replicas, new),
                           adding_replicas=(new,), removing_replicas=(gone,))


@pytest.mark.parametrize("seed", range(12))
def test_replay_keeps_reassigning_in_any_split_of_batches(seed: int) -> None:
    rng = random.Random(seed)
    image = _brokers()
    start = image
    log: list[tuple[int, Record]] = []
    for _ in range(40):  # batches
        batch = []
        working = image
        for _ in range(rng.randint(1, 8)):
            record = _random_record(rng, working, [len(log) + len(batch) + 1000 * seed])
            offset = working.offset + 1
            working = apply(working, [(offset, record)])
            batch.append((offset, record))
        image = apply(image, batch)
        assert image == working, f"seed {seed}: one batch and one record at a time differ"
        _assert_derived_maps_agree(image)
        log.extend(batch)
    at_once = apply(start, log)
    assert at_once == image and at_once.topics.reassigning == image.topics.reassigning, f"seed {seed}"
    assert decode_snapshot(encode_snapshot(image)).topics.reassigning == image.topics.reassigning


def _image_with(records: list[Record]) -> MetadataImage:
    image = _brokers()
    return apply(image, [(image.offset + 1 + i, r) for i, r in enumerate(records)])


def test_a_big_topic_without_reassignments_has_none_to_complete_or_list() -> None:
    image = _image_with([Topic("big", "B"), *(Partition("B", p, (1, 2, 3), (1, 2, 3), leader=1)
                                             for p in range(500))])
    assert image.topics.reassigning == frozenset()
    assert complete_reassignments(image).records == ()
    assert list_reassignments(image) == ()


def test_complete_reassignments_reads_the_running_ones_in_topic_name_order() -> None:
    # "b" (id A) and "a" (id Z): topic name order, not topic id order, as before the index
    records: list[Record] = [Topic("b", "A"), Topic("a", "Z")]
    for topic_id in ("A", "Z"):
        records += [Partition(topic_id, p, (1, 2, 3), (1, 2, 3), leader=1) for p in range(4)]
        # partition 2: adding 4 and already in the ISR (completable); partition 3: 4 not in the ISR yet
        records.append(PartitionChange(topic_id, 2, replicas=(1, 2, 3, 4), isr=(1, 2, 3, 4),
                                       adding_replicas=(4,), removing_replicas=(1,)))
        records.append(PartitionChange(topic_id, 3, replicas=(1, 2, 3, 4), adding_replicas=(4,),
                                       removing_replicas=(1,)))
    image = _image_with(records)
    assert image.topics.reassigning == {("A", 2), ("A", 3), ("Z", 2), ("Z", 3)}
    assert [(o.topic, o.partition_id) for o in list_reassignments(image)] == \
        [("a", 2), ("a", 3), ("b", 2), ("b", 3)]
    result = complete_reassignments(image)
    assert result.response == 2
    assert [(r.topic_id, r.partition_id) for r in result.records] == [("Z", 2), ("A", 2)]
    done = apply(image, [(image.offset + 1 + i, r) for i, r in enumerate(result.records)])
    assert done.topics.reassigning == {("A", 3), ("Z", 3)}
    gone = apply(done, [(done.offset + 1, RemoveTopic("A"))])
    assert gone.topics.reassigning == {("Z", 3)}
