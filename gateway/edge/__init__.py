"""The edge: AG-UI over HTTP (POST /agents/{agent}, SSE) backed by Kafka.

`app.py` is the ASGI application, `stream.py` the SSE stream of one run;
the `agui-gateway edge` command is `gateway.commands.edge`.
"""
