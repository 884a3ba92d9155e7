"""The Kafka binding: clients, topic names, ACLs and the wire formats aiokafka lacks.

Owns how the gateway talks to Kafka: building clients with the settings' security,
naming and creating topics, the ACLs a principal needs, fetch sessions and the
fetcher's walk, KIP-447's request formats, batched look-ups, lag, reply topics, the
broker's liveness and refused operations. Imports nothing else of `gateway.kafka`:
every other layer builds on it.
"""
