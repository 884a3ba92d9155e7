"""The interrupt inbox: open interrupts of every agent, served and answerable.

The gateway writes each interrupt it opens or closes to the compacted interrupts topic
(`gateway.codec.interrupts`) in the transaction of the state change; this package
reads that topic into a view any process can serve: `items` (one open interrupt, as
held and as answered), `index` (the pure in-memory index: filters, order, paging,
summary), `query` (a request's parameters, read and checked), `view` (the index
behind the contract's InboxSource: answers and live changes), `reader` (the Kafka
reader that feeds it, and its lag), `findings` (the last hour of warnings and rejections
the summary counts), `history` (per thread: runs, how their interrupts closed, last
verdicts; bounded), `verdicts` (an audit record read into a thread's verdict), `trail`
(the reader of the audit topic that feeds them), `api` (the JSON API), `auth` (who is
asking: the inbox token, a person's JWT verified by the edge's verifier, or a session),
`cookie` (a person's session, sealed), `session` (the browser's sign-in) and `service`
(the view, its reader and its routes, as a command or the gateway runs them).
It imports the codec, the settings, the client and the edge's token verifier, never the
gateway's Kafka loop.
"""
