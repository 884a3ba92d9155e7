"""One partition pair: what it consumes, decides and must write, as values.

Owns the pair (partition p of an owner's events and requests), its merge in
timestamp order, what a request decides, the round of outputs until it commits, the
shape of every record written, sweeps, and whose a record is (agents and groups).
Nothing here commits or talks to the broker. May import `gateway.kafka.wire`, the
core, the codec, the state store and the observers; nothing above it.
"""
