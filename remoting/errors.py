"""Remoting-level exceptions: transport and protocol failures, independent of business codes."""

from __future__ import annotations


class RemotingError(Exception):
    """Base class of every remoting failure."""


class ProtocolError(RemotingError):
    """The peer sent bytes that are not a valid RemotingCommand frame; the connection must close."""


class RemotingConnectError(RemotingError):
    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"connect to {addr} failed: {reason}")
        self.addr = addr


class RemotingSendRequestError(RemotingError):
    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"send request to {addr} failed: {reason}")
        self.addr = addr


class RemotingTimeoutError(RemotingError):
    def __init__(self, addr: str, code: int, elapsed_ms: float, timeout_ms: float) -> None:
        from .codes import code_name

        super().__init__(
            f"request {code_name(code, response=False)} to {addr} timed out after "
            f"{elapsed_ms:.0f} ms (timeout {timeout_ms:.0f} ms)"
        )
        self.addr = addr
        self.code = code
        self.elapsed_ms = elapsed_ms
        self.timeout_ms = timeout_ms


class RemotingConnectionClosedError(RemotingError):
    def __init__(self, addr: str, code: int | None = None, reason: str = "connection closed") -> None:
        from .codes import code_name

        what = f" while waiting for {code_name(code, response=False)}" if code is not None else ""
        super().__init__(f"{reason} by {addr}{what}")
        self.addr = addr
        self.code = code


class RemotingTooMuchRequestError(RemotingError):
    """Too many requests in flight on this client (the bounded in-flight table is full)."""
