"""agui-gateway: enforces AG-UI 1.0 interrupt/resume rules on Kafka."""

__version__ = "0.1.0"
