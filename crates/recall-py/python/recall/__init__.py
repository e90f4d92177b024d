"""recall: a memcached-compatible client with write backup.

``recall.Client`` has pymemcache's Client interface; ``recall.DurableClient``
adds the write backup and the replay after a server restart. Both are
recall-client and recall-durable (Rust) underneath, with the GIL released while they wait on
the network.
"""

from .client import Client, DurableClient, StreamReader
from .exceptions import *  # noqa: F403
from .exceptions import __all__ as _exceptions

HashClient = Client

__all__ = ["Client", "DurableClient", "HashClient", "StreamReader", *_exceptions]
