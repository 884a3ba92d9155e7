"""Assignment: which pairs this instance holds, and taking them in and out.

Owns the pair assignor (balanced, sticky, co-partitioned), preparing a pair (fences,
restore from the changelog, seek), revoking, and the gauges of what is held. May
import every other layer of `gateway.kafka` except the runner.
"""
