"""The transaction coordinator: the `transactions/` rules per `__transaction_state` partition
led here, on the coordinator runtime (`broker.coordinator`); the marker sender; creating
`__transaction_state` when FindCoordinator first asks for a transactional id."""
