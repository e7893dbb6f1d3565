"""What to test: cases, suites, their checks and their sequence lengths."""
