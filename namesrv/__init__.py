"""RocketMQ NameServer: a stateless route registry brokers register with and clients query."""

from .config import NamesrvConfig, load_namesrv_config
from .controller import NamesrvController
from .kv_config_manager import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from .processor import DefaultRequestProcessor
from .route_info_manager import BrokerLiveInfo, RegisterBrokerResult, RouteInfoManager

__all__ = [
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "BrokerLiveInfo",
    "DefaultRequestProcessor",
    "KVConfigManager",
    "NamesrvConfig",
    "NamesrvController",
    "RegisterBrokerResult",
    "RouteInfoManager",
    "load_namesrv_config",
]
