"""Quinn's agent."""
