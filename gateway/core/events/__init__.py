"""The thread state machine: one event in, a new state and its warnings out (runs,
interrupts, subagents). May import `gateway.core.values` and `gateway.core.reading`.
"""
