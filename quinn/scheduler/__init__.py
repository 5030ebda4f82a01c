"""Quinn's scheduler."""
