"""The `agui-gateway` commands, one module each, dispatched by `gateway.cli`.

- `run`: the gateway with its HTTP endpoints (`gateway.kafka.runner`);
- `check`: the offline judge (the core on files, no Kafka);
- `bridge`: HTTP AG-UI agents behind the gateway (`gateway.bridge`);
- `edge`: AG-UI over HTTP in front of the gateway (`gateway.edge`);
- `demo`: the gateway with simulated agents and clients (`gateway.demo`);
- `topics`: an agent's topic set; `acls`: a gateway principal's ACLs;
- `keys`: a signing key for attesting identities (verified approvers);
- `lifecycle`: what the long-lived commands share (HTTP while running, signals,
  fatal errors as JSON log records, a bounded stop).

Commands compose the rest of the package; nothing but `gateway.cli` imports them
(and `lifecycle` only the commands).
"""
