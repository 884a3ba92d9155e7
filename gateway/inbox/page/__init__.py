"""The inbox page: `/inbox`, open interrupts listed live and answered through the gateway.

It reads the inbox's view through the `InboxSource` protocol (`source.py`) and owns
nothing of it. `form.py` turns a `responseSchema` into a form and the submitted form
back into a payload, `resume.py` the answers into the thread's next `RunAgentInput`
(pure, both); `render.py` builds the HTML, `assets.py` holds the script and style
sheet, `sender.py` sends an answer through `GatewayClient` so that the gateway judges
it like any other request, and `app.py` serves the routes (`routes(...)`).
"""

from gateway.inbox.page.app import InboxPage, routes
from gateway.inbox.page.sender import AnswerSender, KafkaSender
from gateway.inbox.page.source import InboxSource

__all__ = ["AnswerSender", "InboxPage", "InboxSource", "KafkaSender", "routes"]
