"""Long polling: pulls held until messages arrive."""
