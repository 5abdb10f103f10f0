"""Consumer (subscription) group configuration."""
