"""One module per user-facing command: thin orchestration of the core and the host."""
