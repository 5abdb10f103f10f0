"""One request processor per family of request codes (RocketMQ's broker processors)."""
