"""`agui-gateway demo`: the gateway in-process with simulated agents and clients.

The demo creates the agent's topics, runs the gateway and its HTTP endpoints
in this process, drives a traffic generator of simulated agents (publishing
AG-UI event streams, running forwarded requests) and clients (answering
interrupts, well and badly), and shows a live summary until Ctrl-C or
`--duration`. The gateway's JSON logs go to a file, not the console.
With `--real-agent` it also runs a real offline agent behind the bridge
(`gateway.demo.bridged`; needs the `demo` extra). With `--group-agents N` the
simulated agents are N agents of one group named `--agent`, on the group's topics.
The demo itself is the `gateway.demo` package.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
from pathlib import Path

from gateway.demo import real_name
from gateway.observe import logs
from gateway.settings import AgentGroup, Settings

PROG = "agui-gateway demo"


def _log_to_file(settings: Settings, agent: str) -> tuple[Path, list[logging.Handler]]:
    """JSON logs to a file in the temp dir; returns it and the handlers it replaced."""
    previous = list(logging.getLogger().handlers)
    path = Path(tempfile.gettempdir()) / f"agui-gateway-demo-{agent}.log"
    logs.configure(settings.log_level)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logs.JsonFormatter())
    logging.getLogger().handlers[:] = [handler]
    return path, previous


def _with_group(settings: Settings, group: str, members: list[str]) -> tuple[Settings, str | None]:
    """The settings with the demo's group (`group` of `members`), or why not."""
    pattern = settings.topic_regex(settings.events_topic)
    bad = [m for m in members if not pattern.match(settings.topic(settings.events_topic, m))]
    if bad:
        return settings, f"{bad[0]!r} (a group agent) is not a valid agent name"
    if group in settings.groups:
        return settings, f"the settings already have a group {group!r}: choose another --agent"
    grouped = settings.model_copy(
        update={"groups": {**settings.groups, group: AgentGroup(agents=members)}}
    )
    taken = [m for m in members if grouped.group_of(m) != group]
    if taken:
        return settings, f"{taken[0]!r} is already an agent of group {grouped.group_of(taken[0])!r}"
    return grouped, None


def main(
    settings: Settings,
    agent: str,
    partitions: int,
    rate: float,
    duration: float | None,
    real_agent: bool = False,
    group_agents: int = 0,
) -> int:
    """Run the demo; the exit status: 0 done, 1 broke while running, 2 could not start."""
    from gateway.demo.app import DemoFailed, run
    from gateway.demo.wire import DemoSetupError

    problem = None
    if partitions < 1:
        problem = "--partitions must be at least 1"
    elif not rate > 0:
        problem = "--rate must be above 0"
    elif duration is not None and not duration > 0:
        problem = "--duration must be above 0"
    elif group_agents < 0:
        problem = "--group-agents must be 0 or more"
    elif not settings.topic_regex(settings.events_topic).match(
        settings.topic(settings.events_topic, agent)
    ):
        problem = f"{agent!r} is not a valid agent name (pattern {settings.agent_name_pattern})"
    elif real_agent:
        from gateway.demo.real_agent import missing

        problem = missing()
        if problem is None and not settings.topic_regex(settings.events_topic).match(
            settings.topic(settings.events_topic, real_name(agent))
        ):
            problem = f"{real_name(agent)!r} (the real agent) is not a valid agent name"
    members = [f"{agent}-{n}" for n in range(1, group_agents + 1)]
    if problem is None and members:
        settings, problem = _with_group(settings, agent, members)
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    path, previous = _log_to_file(settings, agent)
    try:
        asyncio.run(
            run(
                settings,
                agent,
                partitions,
                rate,
                duration,
                str(path),
                sys.stdout,
                real_name(agent) if real_agent else None,
                members,
            )
        )
    except DemoSetupError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except DemoFailed as exc:
        print(f"{PROG}: {exc} (see {path})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the demo's own handler was installed
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        for handler in logging.getLogger().handlers:
            handler.close()
        logging.getLogger().handlers[:] = previous
    return 0
