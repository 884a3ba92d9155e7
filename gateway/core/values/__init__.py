"""The core's plain values: codes and their meanings, findings, decisions, a thread's
state, and small pure helpers (a byte-bounded cache, JSON text). Imports nothing
else of the core.
"""
