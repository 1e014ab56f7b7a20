"""`python -m fak_engine_cpu`: the engine-cpu in the foreground, configured by FAK_* and flags (what `fak serve engine-cpu` runs)."""

from fak_engine_cpu.main import main
from fakcore.service import foreground

raise SystemExit(foreground("engine-cpu", main))
