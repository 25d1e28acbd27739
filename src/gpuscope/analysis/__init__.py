"""Statistics, correlation and the rule registry behind `explain`."""
