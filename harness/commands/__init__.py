"""One module per subcommand: each has ``add_parser(subparsers)`` and ``main(args) -> exit code``."""
