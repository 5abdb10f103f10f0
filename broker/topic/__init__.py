"""Topic configuration and topic name rules."""
