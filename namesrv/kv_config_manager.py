"""KVConfigManager: namespace -> key -> value, persisted as JSON at kvConfigPath.

The file has Java's KVConfigSerializeWrapper shape, `{"configTable":{"<ns>":{"<k>":"<v>"}}}`,
so a kvConfig.json from a Java NameServer loads here and the other way round.

Tables change only in synchronous code on the event loop (see route_info_manager's note on
locking). Persisting takes a snapshot under an asyncio.Lock and writes it in a worker thread
(temp file + fsync + rename): writes happen in the order the snapshots were taken, so the
file always ends with the latest state.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import structlog

from remoting import jsonutil
from remoting.properties import ConfigError

from .file_util import atomic_write

log = structlog.get_logger(__name__)

# NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, kv_config_path: str | Path) -> None:
        self.kv_config_path = Path(kv_config_path)
        self.config_table: dict[str, dict[str, str]] = {}
        self._persist_lock = asyncio.Lock()

    # ------------------------------------------------------------------ load / persist

    def load(self) -> None:
        """Blocking: read kvConfigPath if it exists. A corrupt file raises ConfigError."""
        p = self.kv_config_path
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            log.info("kv_config_not_found_starting_empty", path=str(p))
            return
        except OSError as e:
            raise ConfigError(f"kvConfigPath: cannot read {p}: {e.strerror or e}") from None
        if not raw.strip():
            return
        try:
            obj = jsonutil.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ConfigError(f"kvConfigPath: {p} is not valid JSON: {e}") from None
        table = obj.get("configTable") if isinstance(obj, dict) else None
        if table is None:
            table = {}
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise ConfigError(f"kvConfigPath: {p} has no configTable of namespace -> {{key: value}}")
        self.config_table = {
            str(ns): {str(k): "" if v is None else str(v) for k, v in kv.items()} for ns, kv in table.items()
        }
        log.info("kv_config_loaded", path=str(p), namespaces=len(self.config_table))

    def snapshot_json(self) -> bytes:
        return json.dumps(
            {"configTable": self.config_table}, indent=2, sort_keys=True, ensure_ascii=False
        ).encode()

    async def persist(self) -> None:
        """Write the current table to kvConfigPath off the event loop. Raises OSError on failure."""
        async with self._persist_lock:
            data = self.snapshot_json()  # taken inside the lock: later callers write later states
            path = self.kv_config_path
            try:
                await asyncio.to_thread(atomic_write, path, data)
            except OSError as e:
                log.error("kv_config_persist_failed", path=str(path), error=str(e))
                raise

    # ------------------------------------------------------------------ table operations

    def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        kv = self.config_table.get(namespace)
        if kv is None:
            kv = self.config_table[namespace] = {}
            log.info("kv_namespace_created", namespace=namespace)
        prev = kv.get(key)
        kv[key] = value
        log.info("kv_config_put", namespace=namespace, key=key, value=value, updated=prev is not None)

    def delete_kv_config(self, namespace: str, key: str) -> bool:
        kv = self.config_table.get(namespace)
        if kv is None or key not in kv:
            return False
        value = kv.pop(key)
        if not kv:
            del self.config_table[namespace]
        log.info("kv_config_deleted", namespace=namespace, key=key, value=value)
        return True

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        kv = self.config_table.get(namespace)
        return kv.get(key) if kv is not None else None

    def get_kv_list_by_namespace(self, namespace: str) -> dict[str, str] | None:
        kv = self.config_table.get(namespace)
        return dict(kv) if kv is not None else None
