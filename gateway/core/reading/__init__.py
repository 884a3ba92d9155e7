"""Reading what arrives: a RunAgentInput's shape by the processing model, unknown
members stripped, an event's extra members, `responseSchema` checks and `expiresAt`
times. May import `gateway.core.values`.
"""
