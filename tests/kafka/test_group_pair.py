"""A group's pair: many agents' threads on one pair of partitions, without Kafka.

Threads are held by (agent, threadId), records name their agent in `agui-agent`, and
a record whose agent is not usable gets its own code without disturbing the rest.
"""

from __future__ import annotations

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.codec import changelog
from gateway.codec.records import InRecord
from gateway.kafka.pairs.agents import GroupTopics, OwnTopics
from gateway.kafka.pairs.pair import PairContext, PartitionPair
from gateway.kafka.wire.topics import AgentTopics
from gateway.observe.metrics import Metrics
from gateway.observe.warnings import WarningLimiter
from gateway.settings import Settings
from gateway.state.retention import Retention
from gateway.state.store import ThreadStore
from tests.kafka.test_pair import answer, commit, interrupted, sample, started

GROUP = AgentTopics(
    "team",
    "agui.team.events",
    "agui.team.requests",
    "agui.team.run-requests",
    "agui.team.gateway-changelog",
    "agui.rejections",
    "agui.warnings",
)
SETTINGS = Settings(
    groups={
        "team": {"agents": ["alpha", "beta"], "agent_pattern": "w-[0-9]+"},
        "other": {"agents": ["gamma"]},
    }
)
REPLY = ("agui-reply-to", b"replies")


def make_group_pair(
    retention: Retention | None = None,
    settings: Settings = SETTINGS,
    topics: AgentTopics = GROUP,
) -> tuple[PartitionPair, CollectorRegistry]:
    registry = CollectorRegistry()
    ctx = PairContext(
        False,
        5.0,
        retention or Retention(10**9, 10**9, 10**9),
        Metrics(registry),
        WarningLimiter(5, 60_000),
        {"replies"}.__contains__,
    )
    return PartitionPair(topics, 0, ctx, GroupTopics("team", settings)), registry


class GroupFeed:
    def __init__(self, topic: str = "agui.team") -> None:
        self.topic = topic
        self.offsets = {"events": 0, "requests": 0}

    def rec(
        self,
        side: str,
        value,
        ts: int,
        agent: str | bytes | None,
        key: str | None = "t1",
        headers=(),
    ) -> InRecord:
        offset = self.offsets[side]
        self.offsets[side] += 1
        body = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
        named = (
            []
            if agent is None
            else [("agui-agent", agent if isinstance(agent, bytes) else agent.encode())]
        )
        return InRecord(
            f"{self.topic}.{side}",
            0,
            offset,
            ts,
            1,
            key.encode() if key else None,
            body,
            (*named, *headers),
        )


def bodies(pair: PartitionPair, topic: str) -> list[dict]:
    return [orjson.loads(r.value) for r in pair.round.out if r.topic == topic]


def header(record, name: str) -> bytes | None:
    return dict(record.headers).get(name)


def test_two_agents_with_one_thread_id_never_share_state_verdicts_or_forwards():
    pair, _ = make_group_pair()
    f = GroupFeed()
    pair.take(
        "events",
        [
            f.rec("events", started("ra"), 10, "alpha"),
            f.rec("events", interrupted("ra"), 20, "alpha"),
            f.rec("events", started("rb"), 30, "beta"),  # beta's t1: running
        ],
    )
    pair.take(
        "requests",
        [
            f.rec("requests", answer("ra2"), 40, "beta", headers=[REPLY]),  # beta's run active
            f.rec("requests", answer("ra2"), 50, "alpha", headers=[REPLY]),  # alpha's answer
        ],
    )
    pair.set_fence(3)
    pair.process(3, 0.0, 0)
    rejections = bodies(pair, "agui.rejections")
    assert [(r["agent"], r["group"], r["reasons"][0]["code"]) for r in rejections] == [
        ("beta", "team", "run_active")
    ]
    forwards = [r for r in pair.round.out if r.topic == "agui.team.run-requests"]
    assert len(forwards) == 1
    assert forwards[0].key == b"t1" and header(forwards[0], "agui-agent") == b"alpha"
    replies = [r for r in pair.round.out if r.topic == "replies"]
    assert [
        (orjson.loads(r.value)["agent"], orjson.loads(r.value)["verdict"]) for r in replies
    ] == [
        ("beta", "reject"),
        ("alpha", "forward"),
    ]
    assert [header(r, "agui-agent") for r in replies] == [b"beta", b"alpha"]
    commit(pair)
    alpha = pair.state(changelog.group_key("alpha", "t1"))
    beta = pair.state(changelog.group_key("beta", "t1"))
    assert alpha is not None and beta is not None
    assert (alpha.thread_id, alpha.run_id, str(alpha.status)) == ("t1", "ra", "interrupted")
    assert [f.run_id for f in alpha.forwards] == ["ra2"]  # alpha's answer remembered
    assert beta.forwards == ()
    assert (beta.thread_id, beta.run_id, str(beta.status)) == ("t1", "rb", "active")
    assert pair.state("t1") is None  # nothing under the bare threadId
    assert pair.thread_count == 2
    # alpha's answer again: a duplicate for alpha only; beta's thread is untouched
    pair.take("requests", [f.rec("requests", answer("ra2"), 60, "alpha")])
    pair.set_fence(3)
    pair.process(3, 0.0, 0)
    assert [r.topic for r in pair.round.out] == []  # a duplicate writes nothing without reply
    assert pair.state(changelog.group_key("beta", "t1")).run_id == "rb"


def test_a_groups_changelog_keys_name_agent_and_thread_and_restore_apart():
    pair, _ = make_group_pair()
    f = GroupFeed()
    pair.take(
        "events",
        [
            f.rec("events", started("ra"), 10, "alpha"),
            f.rec("events", interrupted("ra", "x"), 20, "alpha"),
            f.rec("events", started("rb"), 30, "beta"),
        ],
    )
    pair.process(None, 0.0, 0)
    records = pair.round.changelog_records()
    assert sorted(r.key for r in records) == [b"4:beta:t1", b"5:alpha:t1"]
    assert all(r.topic == "agui.team.gateway-changelog" and r.partition == 0 for r in records)
    commit(pair)
    # a restart: the changelog read back into a fresh pair (as `Restorer` loads it)
    store = ThreadStore(pair.layout.thread_of)
    active = set()
    for r in records:
        store.load(r.value, r.key.decode())
        if dict(r.headers)["agui-status"] == b"active":
            active.add(r.key.decode())
    fresh, _ = make_group_pair()
    fresh.load_store(store, active, 1)
    alpha = fresh.state("5:alpha:t1")
    beta = fresh.state("4:beta:t1")
    assert alpha.thread_id == "t1" and [i.id for i in alpha.interrupts] == ["x"]
    assert beta.thread_id == "t1" and str(beta.status) == "active"
    # judged on the restored state, per agent: alpha's answer forwards, beta's is run_active
    g = GroupFeed()
    g.offsets = {"events": 3, "requests": 0}
    fresh.take(
        "requests",
        [
            f.rec("requests", answer("n1", "x"), 40, "beta"),
            f.rec("requests", answer("n1", "x"), 50, "alpha"),
        ],
    )
    fresh.set_fence(3)
    fresh.process(3, 0.0, 0)
    assert [r.topic for r in fresh.round.out] == ["agui.rejections", "agui.team.run-requests"]
    # a streamed delta for beta's active run takes the fast path, keyed by agent too
    fresh.take(
        "events",
        [
            g.rec(
                "events", b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}', 60, "beta"
            )
        ],
    )
    fresh.process(None, 0.0, 0)
    assert [r.topic for r in fresh.round.out] == ["agui.rejections", "agui.team.run-requests"]


@pytest.mark.parametrize(
    ("agent", "code"),
    [
        (None, "agent_missing"),
        (b"", "agent_missing"),
        ("gamma", "agent_not_allowed"),  # another group's agent
        ("stranger", "agent_not_allowed"),  # named by no group: topics of its own
        ("no/slash", "agent_name_illegal"),
        (b"\xff\xfe", "agent_name_illegal"),
        ("x" * 250, "agent_name_illegal"),
    ],
)
def test_a_request_with_no_usable_agent_is_rejected_with_its_code_and_the_rest_decided(agent, code):
    pair, registry = make_group_pair()
    f = GroupFeed()
    pair.take(
        "events",
        [
            f.rec("events", started("ra"), 10, "alpha"),
            f.rec("events", interrupted("ra"), 20, "alpha"),
        ],
    )
    pair.take(
        "requests",
        [
            f.rec("requests", answer(), 30, agent, headers=[REPLY]),
            f.rec("requests", answer(), 40, "alpha"),
        ],
    )
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    assert [r.topic for r in pair.round.out] == [
        "agui.rejections",
        "replies",
        "agui.team.run-requests",
    ]
    rejection, reply = bodies(pair, "agui.rejections")[0], bodies(pair, "replies")[0]
    assert rejection == reply
    assert rejection["agent"] is None and rejection["group"] == "team"
    assert [r["code"] for r in rejection["reasons"]] == [code]
    assert rejection["threadId"] == "t1" and rejection["input"] == answer()
    assert header(pair.round.out[0], "agui-agent") is None  # no usable agent to name
    assert pair.round.offsets == {"events": 2, "requests": 2}
    commit(pair)
    assert sample(registry, "agui_gateway_rejections_total", agent="team", reason=code) == 1
    assert pair.thread_count == 1  # nothing remembered of the rejected request


@pytest.mark.parametrize(
    ("agent", "code"),
    [
        (None, "agent_missing"),
        ("gamma", "agent_not_allowed"),
        ("bad agent", "agent_name_illegal"),
    ],
)
def test_an_event_with_no_usable_agent_is_a_warning_and_the_rest_applied(agent, code):
    pair, registry = make_group_pair()
    f = GroupFeed()
    pair.take(
        "events",
        [
            f.rec("events", started("rx"), 5, agent),
            f.rec("events", started("ra"), 10, "alpha"),
            f.rec("events", interrupted("ra"), 20, "alpha"),
        ],
    )
    pair.process(None, 0.0, 0)
    warnings = bodies(pair, "agui.warnings")
    assert [(w["code"], w["agent"], w["group"], w["threadId"]) for w in warnings] == [
        (code, None, "team", "t1")
    ]
    assert warnings[0]["detail"].endswith("Dropped")
    assert warnings[0]["source"] == {"topic": "agui.team.events", "partition": 0, "offset": 0}
    commit(pair)
    assert pair.state("5:alpha:t1").run_id == "ra"
    assert pair.thread_count == 1
    assert sample(registry, "agui_gateway_warnings_total", agent="team", code=code) == 1
    assert sample(registry, "agui_gateway_events_total", agent="team", type="RUN_STARTED") == 2


def test_an_agent_new_to_the_group_needs_nothing_but_its_first_record():
    pair, _ = make_group_pair()
    f = GroupFeed()
    pair.take(
        "events",
        [
            f.rec("events", started("r1"), 10, "w-41"),
            f.rec("events", interrupted("r1"), 20, "w-41"),
        ],
    )
    pair.take("requests", [f.rec("requests", answer(), 30, "w-41")])
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    assert [(r.topic, header(r, "agui-agent")) for r in pair.round.out] == [
        ("agui.team.run-requests", b"w-41")
    ]


def test_sweep_expiries_and_retention_keep_agents_apart():
    pair, _ = make_group_pair(
        retention=Retention(thread_ms=1_000, interrupt_grace_ms=500, interrupt_ms=10_000)
    )
    f = GroupFeed()
    finished = interrupted("ra")
    finished["outcome"]["interrupts"][0]["expiresAt"] = "1970-01-01T00:00:05Z"
    pair.take(
        "events",
        [
            f.rec("events", started("ra"), 1_000, "alpha"),
            f.rec("events", finished, 2_000, "alpha"),
            f.rec("events", started("rb"), 2_100, "beta"),
        ],
    )
    pair.process(None, 0.0, 0)
    commit(pair)
    pair.sweep(now_ms=5_000)
    warnings = bodies(pair, "agui.warnings")
    assert [(w["code"], w["agent"], w["group"], w["threadId"]) for w in warnings] == [
        ("interrupt_expired", "alpha", "team", "t1")
    ]
    assert header(pair.round.out[0], "agui-agent") == b"alpha"
    assert [r.key for r in pair.round.changelog_records()] == [b"5:alpha:t1"]
    commit(pair)
    pair.sweep(now_ms=5_600)  # alpha's interrupted t1 goes at expiry + grace; beta's stays
    assert [(r.key, r.value) for r in pair.round.changelog_records()] == [(b"5:alpha:t1", None)]
    commit(pair)
    assert pair.state("5:alpha:t1") is None and pair.state("4:beta:t1") is not None
    assert pair.thread_count == 1


def test_warnings_of_two_agents_on_one_thread_id_are_rate_limited_apart():
    pair, _ = make_group_pair()
    f = GroupFeed()
    broken = b"{not json"
    pair.take(
        "events",
        [f.rec("events", broken, i, agent) for i in range(6) for agent in ("alpha", "beta")],
    )
    pair.process(None, 0.0, 0)
    warnings = bodies(pair, "agui.warnings")
    # a burst of 5 each: both agents' warnings pass, neither crowds the other out
    assert sorted(w["agent"] for w in warnings) == ["alpha"] * 5 + ["beta"] * 5


def series(registry: CollectorRegistry) -> set[tuple[str, tuple]]:
    """Every series a registry exports, by name and labels (values left out)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in registry.collect()
        for sample in family.samples
    }


def test_a_groups_metrics_are_labelled_with_the_group_whatever_its_agents():
    def served(agents: int) -> tuple[PartitionPair, CollectorRegistry]:
        pair, registry = make_group_pair()
        f = GroupFeed()
        records = []
        for i in range(agents):  # each agent runs a thread and leaves an interrupt open
            records += [
                f.rec("events", started("r1"), 1, f"w-{i}", key=f"t{i}"),
                f.rec(
                    "events", {**interrupted("r1"), "threadId": f"t{i}"}, 2, f"w-{i}", key=f"t{i}"
                ),
            ]
        pair.take("events", records)
        pair.process(None, 0.0, 0)
        commit(pair)
        return pair, registry

    one, one_registry = served(1)
    many, many_registry = served(10_000)
    assert many.thread_count == 10_000 and many.open_interrupts == 10_000
    # the same series for 10,000 agents as for one: labelled by the group, never per agent
    assert series(many_registry) == series(one_registry)
    assert {dict(labels).get("agent") for _, labels in series(many_registry)} - {None} == {"team"}
    assert sample(many_registry, "agui_gateway_events_total", agent="team", type="RUN_STARTED") == (
        10_000
    )


def test_on_an_agents_own_topics_the_header_is_optional_but_must_name_it():
    from tests.kafka.test_pair import Feed, make_pair

    pair, registry = make_pair()
    assert isinstance(pair.layout, OwnTopics)
    f = Feed()
    pair.take(
        "events",
        [
            f.rec("events", started(), 1, headers=[("agui-agent", b"bot")]),
            f.rec("events", interrupted(), 2),
            f.rec("events", started("rz"), 3, key="t2", headers=[("agui-agent", b"other")]),
        ],
    )
    pair.take(
        "requests",
        [
            f.rec("requests", answer("r8"), 4, headers=[("agui-agent", b"other"), REPLY]),
            f.rec("requests", answer(), 5, headers=[("agui-agent", b"bot")]),
        ],
    )
    pair.set_fence(3)
    pair.process(3, 0.0, 0)
    assert [r.topic for r in pair.round.out] == [
        "agui.warnings",
        "agui.rejections",
        "replies",
        "agui.bot.run-requests",
    ]
    warning, rejection = bodies(pair, "agui.warnings")[0], bodies(pair, "agui.rejections")[0]
    assert (warning["code"], warning["agent"], warning["threadId"]) == (
        "agent_not_allowed",
        "bot",
        "t2",
    )
    assert (rejection["agent"], [r["code"] for r in rejection["reasons"]]) == (
        "bot",
        ["agent_not_allowed"],
    )
    assert "group" not in rejection and "group" not in warning
    # the own layout's outputs carry no agui-agent header: as they always were
    assert all(header(r, "agui-agent") is None for r in pair.round.out)
    commit(pair)
    assert pair.state("t2") is None  # the event naming another agent was dropped
    assert [f.run_id for f in pair.state("t1").forwards] == ["r2"]


def test_group_keys_are_unambiguous():
    for agent, thread in [("a", "b:c"), ("a:b", "c"), ("12", ":"), ("x", ""), ("ü", "3:a:b")]:
        key = changelog.group_key(agent, thread)
        assert changelog.split_group_key(key) == (agent, thread)
    assert changelog.group_key("a:b", "c") != changelog.group_key("a", "b:c")
    for bad in ["t1", "", "3:ab", "3:abc", "0::t", "x:a:b", "²:a:b", "2:abc:d", "1234567:a:b"]:
        assert changelog.split_group_key(bad) is None


def test_the_fast_path_of_one_agents_active_run_never_swallows_anothers_events():
    pair, registry = make_group_pair()
    f = GroupFeed()
    delta = b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}'
    pair.take(
        "events",
        [
            f.rec("events", started("ra"), 1, "alpha"),
            f.rec("events", interrupted("ra"), 2, "alpha"),  # alpha's t1 closed
            f.rec("events", started("rb"), 3, "beta"),  # beta's t1 running
        ],
    )
    pair.process(None, 0.0, 0)
    commit(pair)
    # deltas of both on t1, all buffered: beta's is inside its run, alpha's after a close
    pair.take("events", [f.rec("events", delta, 4, "beta"), f.rec("events", delta, 5, "alpha")])
    pair.process(None, 0.0, 0)
    warnings = bodies(pair, "agui.warnings")
    assert [(w["agent"], w.get("rule")) for w in warnings] == [("alpha", "event_after_close")]
    commit(pair)
    assert (
        sample(registry, "agui_gateway_events_total", agent="team", type="TEXT_MESSAGE_CONTENT")
        == 2
    )
