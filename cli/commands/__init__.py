"""One module per command family; each has ``register(subparsers, common)`` that adds its parsers and sets
``handler`` (a function ``(args, ctx) -> int``) on each."""
