"""`python -m fak_kvmmu`: the kvmmu in the foreground, configured by FAK_* and flags (what `fak serve kvmmu` runs)."""

from fak_kvmmu.main import main
from fakcore.service import foreground

raise SystemExit(foreground("kvmmu", main))
