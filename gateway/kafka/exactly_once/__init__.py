"""Exactly once: a round committed in one transaction, fenced, rewound on failure.

Owns transactions (one producer per pair, or one per instance fenced by the group's
generation, KIP-447), the group's committed offsets, hanging transactions and the
committer that paces each pair's commits. May import `gateway.kafka.wire` and
`gateway.kafka.pairs`; nothing above it.
"""
