"""The transactional ids the gateway and the bridge use: built here, and only here.

The producers take their ids from these functions at run time, and `agui-gateway
acls` derives the TransactionalId ACLs it prints from the same functions, so the
two cannot drift apart:

- `producer_scope = "pair"`: one id per partition pair, `<group_id>.<agent>.<partition>`;
- `producer_scope = "instance"`: one per producer of the instance,
  `<group_id>.instance.<instance_name>`, then `<...>.1` up to `instance_producers - 1`;
- the bridge: one per run-requests partition, `<bridge_group_id>.<agent>.<partition>`.

`prefix_of` gives the fixed head of an id whose later parts vary (every partition
of an agent, every agent of a name prefix, every instance of a name prefix): what
a prefixed ACL must name to cover exactly those ids.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.settings import Settings

# A character no Kafka id holds (they are printable), put where a part of an id
# varies: `prefix_of` cuts the id there.
VARIES = "\x00"


def pair_id(settings: Settings, agent: str, partition: int | str) -> str:
    """The transactional id of a pair's producer (`producer_scope = "pair"`)."""
    return f"{settings.group_id}.{agent}.{partition}"


def instance_id(settings: Settings, index: int | str, instance_name: str | None = None) -> str:
    """The transactional id of an instance's producer `index` (`producer_scope =
    "instance"`); index 0 keeps the single producer's id, stable across restarts."""
    name = settings.instance_name if instance_name is None else instance_name
    base = f"{settings.group_id}.instance.{name}"
    return base if index == 0 else f"{base}.{index}"


def bridge_id(settings: Settings, agent: str, partition: int | str) -> str:
    """The transactional id of the bridge's producer for a run-requests partition."""
    return f"{settings.bridge_group_id}.{agent}.{partition}"


def prefix_of(build: Callable[..., str], settings: Settings, *parts: str | int) -> str:
    """The head shared by every id `build(settings, *parts)` names once `VARIES` is
    replaced by anything: the id built, cut where `VARIES` first shows. A part may be
    `VARIES` (every partition), or end with it (every agent whose name starts so)."""
    head, cut, _ = build(settings, *parts).partition(VARIES)
    if not cut:
        raise ValueError("no part of the id varies")
    return head
