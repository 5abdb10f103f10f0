"""Client-side state kept by the broker: producers, consumers, locks, and calls back to clients."""
