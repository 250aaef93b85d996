"""KIP-932 share groups on the broker: `state.ShareBroker` holds the share groups coordinated
here and the share partitions led here; the handlers are broker/handlers/share_*.py."""
