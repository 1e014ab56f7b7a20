"""gateway: the wires (OpenAI, Anthropic) in, the bus out; the context filter; /healthz and /metrics."""
