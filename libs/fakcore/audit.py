"""The audit log's home: a JetStream stream of AuditRecords (protocol.subjects.AUDIT).

Every verdict is appended once by whoever made it (the adjudicator; a gateway for verdicts it answers from
its cache); eviction receipts stay on fak.v1.kv.evicted and the gateways fold them into their view.
Operators read it through a gateway (`GET /v1/fak/audit`), or with any JetStream client.
"""

from __future__ import annotations

from typing import Any

from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from fakcore.bus import ensure_stream
from fakcore.protocol import subjects

MAX_RECORDS = 5_000_000
MAX_AGE_S = 90 * 24 * 3600


async def ensure_audit_stream(nc: Any, replicas: int | None = None) -> Any:
    """Create (or update) the audit stream (FAK_STREAM_REPLICAS replicas, bus.ensure_stream); returns the
    JetStream context."""
    return await ensure_stream(nc, StreamConfig(name=subjects.AUDIT_STREAM, subjects=["fak.v1.audit.>"],
                                                retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                                                max_msgs=MAX_RECORDS, max_age=MAX_AGE_S), replicas)
