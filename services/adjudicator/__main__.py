"""`python -m fak_adjudicator`: the adjudicator in the foreground, configured by FAK_* and flags (what `fak serve adjudicator` runs)."""

from fak_adjudicator.main import main
from fakcore.service import foreground

raise SystemExit(foreground("adjudicator", main))
