"""Judging one run request against its thread's state, and noticing expired
interrupts on the gateway's own clock. May import `gateway.core.values` and
`gateway.core.reading`.
"""
