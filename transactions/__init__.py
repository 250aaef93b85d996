"""Transactions, pure: the transaction coordinator's `__transaction_state` records in Kafka's
schemas, the transaction state table, and the rules of InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, the timeout abort, transactional-id expiration and the markers'
completion. No I/O: the broker's coordinator runtime (broker/transaction_coordinator/) owns
sockets, timers, producer-id blocks and appends."""

PURE = True  # every module of this package is a pure core: no sockets, threads, clocks or files
