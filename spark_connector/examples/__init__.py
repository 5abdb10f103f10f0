"""Runnable examples of the Spark connector (see each module's docstring for its command)."""
