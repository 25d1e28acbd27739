"""One thin module per subcommand: parse, call the core, render."""
