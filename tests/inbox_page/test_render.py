"""Whatever a record holds, the page's HTML shows it as text: no tag or attribute of its own."""

from __future__ import annotations

from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.inbox.page import render
from tests.inbox_page.memory import item

NOW = 1_764_000_000_000
TAGS = {"tr", "td", "a", "span"}
ATTRIBUTES = {"class", "data-key", "data-agent", "data-reason", "data-opened", "data-expires"}
ATTRIBUTES |= {"data-text", "href", "title"}


class _Parsed(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: dict[str, str] = {}
        self.cells: dict[str, str] = {}
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            self.attributes.setdefault(name, value or "")
        if tag == "td":
            self._cell = dict(attrs).get("class") or ""
            self.cells.setdefault(self._cell, "")

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self.cells[self._cell] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None


# \r and \0 are turned into other characters by any HTML parser: left out here
text = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\r\0"), min_size=1, max_size=40
)


@settings(max_examples=300, deadline=None)
@given(text, text, text, text, text)
def test_a_row_shows_every_field_as_text(agent, thread, interrupt, reason, message):
    html = render.row(
        "/inbox", item(agent, thread, interrupt, reason=reason, message=message, opened_ms=NOW), NOW
    )
    parsed = _Parsed()
    parsed.feed(html)
    parsed.close()
    assert set(parsed.tags) <= TAGS
    assert set(parsed.attributes) <= ATTRIBUTES
    assert parsed.cells["agent"] == agent
    assert parsed.cells["thread"] == thread
    assert parsed.cells["reason"] == reason
    assert parsed.cells["message"] == message
    assert parsed.attributes["data-agent"] == agent
    assert parsed.cells["interrupt"] == interrupt


def test_the_expiry_and_age_texts():
    assert render.duration(5) == "5s"
    assert render.duration(65) == "1m 05s"
    assert render.duration(3 * 3600 + 120) == "3h 02m"
    assert render.duration(-3) == "0s"
    assert render.expiry_text({"expiresAtMs": NOW + 90_000}, NOW) == "in 1m 30s"
    assert render.expiry_text({"expiresAtMs": NOW}, NOW) == "expired"
    assert render.expiry_text({"expiresAtMs": None}, NOW) == "never"


def test_a_long_message_is_cut_in_the_list():
    html = render.row("/inbox", item("a", "t", "i", message="x" * 1000, opened_ms=NOW), NOW)
    parsed = _Parsed()
    parsed.feed(html)
    assert parsed.cells["message"] == "x" * render.MESSAGE_CHARS + "…"


def test_thread_links_carry_any_name_as_query_parameters():
    href = render.thread_href("/inbox", "a&b", "t/1?x=#y")
    assert href == "/inbox/thread?agent=a%26b&thread=t%2F1%3Fx%3D%23y"
