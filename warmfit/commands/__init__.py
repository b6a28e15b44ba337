"""One module per ``warmfit`` subcommand (the manner of memray's ``commands/``)."""
