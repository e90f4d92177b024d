"""recall's exceptions.

They have pymemcache's names and, when pymemcache is installed, are its
classes (or subclasses of them), so code written against pymemcache that
catches ``pymemcache.exceptions.MemcacheError`` keeps working when it
switches to ``recall.Client``. Without pymemcache the same hierarchy is
defined here.
"""

from __future__ import annotations

try:
    from pymemcache.exceptions import (
        MemcacheClientError,
        MemcacheError,
        MemcacheIllegalInputError,
        MemcacheServerError,
        MemcacheUnexpectedCloseError,
        MemcacheUnknownCommandError,
        MemcacheUnknownError,
    )
except ImportError:  # pymemcache is optional

    class MemcacheError(Exception):
        """Base class of every error this client raises."""

    class MemcacheClientError(MemcacheError):
        """The server answered CLIENT_ERROR."""

    class MemcacheUnknownCommandError(MemcacheClientError):
        """The server answered ERROR."""

    class MemcacheIllegalInputError(MemcacheClientError):
        """A key or value the protocol cannot carry (rejected before sending)."""

    class MemcacheServerError(MemcacheError):
        """The server answered SERVER_ERROR."""

    class MemcacheUnknownError(MemcacheError):
        """A reply that could not be parsed."""

    class MemcacheUnexpectedCloseError(MemcacheServerError):
        """The connection closed under a request."""


class RecallConnectionError(MemcacheUnexpectedCloseError, ConnectionError):
    """Could not connect, or the connection failed under a request."""


class RecallTimeoutError(MemcacheError, TimeoutError):
    """A connect or request timeout (pymemcache raises socket.timeout, which
    is TimeoutError: this is one too)."""


class RecallServerDeadError(MemcacheServerError):
    """The server failed recently and is in back-off: nothing was sent."""


class RecallNotReplayedError(MemcacheServerError):
    """DurableClient: the server restarted and this client's replay to it has
    not finished, so the write was not sent (retry it)."""


__all__ = [
    "MemcacheError",
    "MemcacheClientError",
    "MemcacheUnknownCommandError",
    "MemcacheIllegalInputError",
    "MemcacheServerError",
    "MemcacheUnknownError",
    "MemcacheUnexpectedCloseError",
    "RecallConnectionError",
    "RecallTimeoutError",
    "RecallServerDeadError",
    "RecallNotReplayedError",
]
