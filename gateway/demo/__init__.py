"""The demo: the gateway in-process with simulated agents and clients.

`app.py` runs it (topics, the gateway and its HTTP endpoints, a traffic
generator of simulated agents and clients, a live summary), `console.py`
draws the summary, `bridged.py` and `real_agent.py` add a real offline agent
behind the bridge (`--real-agent`; the `demo` extra). The `agui-gateway demo`
command is `gateway.commands.demo`. Nothing else in `gateway` imports this
package.
"""

from __future__ import annotations


def real_name(agent: str) -> str:
    """The real agent's name (`--real-agent`), beside the simulated one's."""
    return f"{agent}-payments"
