"""The broker daemon (`mqbroker`): BrokerController wires the processors, managers and the store."""

from broker.config import BrokerConfig
from broker.controller import BrokerController

__all__ = ["BrokerConfig", "BrokerController"]
