"""The broker's request handlers, grouped by concern; `broker.request_handler.API_TABLE`
routes each API to one of them. `context` holds what they share."""
