"""Consumer offsets committed to the broker."""
