"""The agent bridge: any HTTP AG-UI agent behind the gateway, unchanged.

`ledger` (per-partition bookkeeping, pure), `sse` (bounded SSE reading),
`relay` (one run), `outbox` (the partition's transactions), `partition` (its
runs), `service` (the consumer loop), `metrics`, `main` (the process).
"""
