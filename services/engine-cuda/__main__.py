"""`python -m fak_engine_cuda`: the engine-cuda in the foreground, configured by FAK_* and flags (what `fak serve engine-cuda` runs)."""

from fak_engine_cuda.main import main
from fakcore.service import foreground

raise SystemExit(foreground("engine-cuda", main))
