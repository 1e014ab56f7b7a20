"""fakcore: everything the fak services share (bus protocol, settings, models, engine, policy, CLI)."""

__version__ = "0.1.0"
