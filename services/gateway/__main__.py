"""`python -m fak_gateway`: the gateway in the foreground, configured by FAK_* and flags (what `fak serve gateway` runs)."""

from fak_gateway.main import main
from fakcore.service import foreground

raise SystemExit(foreground("gateway", main))
