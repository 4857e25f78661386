"""One module per `fl-sdk` subcommand; see fl_sdk/cli.py."""
