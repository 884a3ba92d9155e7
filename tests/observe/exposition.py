"""Reading the gateway's /metrics text (Prometheus exposition format) in tests."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def parse(text: str) -> Samples:
    """Every sample: (sample name, labels) -> value."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def select(samples: Samples, name: str, **match: str) -> dict[Labels, float]:
    """The samples of `name` whose labels include `match`."""
    want = set(match.items())
    return {labels: v for (n, labels), v in samples.items() if n == name and want <= labels}


def by(samples: Samples, name: str, label: str | tuple[str, ...], **match: str) -> dict:
    """Values of `name` keyed by one label (or a tuple of labels), summed over the rest."""
    out: dict = {}
    for labels, value in select(samples, name, **match).items():
        as_dict: Mapping[str, str] = dict(labels)
        key = (
            as_dict.get(label)
            if isinstance(label, str)
            else tuple(as_dict.get(part) for part in label)
        )
        out[key] = out.get(key, 0.0) + value
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(select(samples, name, **match).values())


def stable_view(samples: Samples) -> Samples:
    """The samples that stop changing once the gateway is idle (no lag, no timestamps)."""
    return {
        key: value
        for key, value in samples.items()
        if key[0].startswith("agui_gateway_")  # process_* and python_* keep changing
        and not key[0].endswith("_created")
        and key[0] != "agui_gateway_consumer_lag"
    }
