"""Kafka's ACL authorizer, pure: bindings and filters (`acl`), the StandardAuthorizer's decision
rules and its per-principal cache (`authorizer`), and its settings (`settings`)."""
