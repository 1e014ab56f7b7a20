"""adjudicator: tool-call verdicts by policy, inbound tool-result screening, the quarantine verdicts."""
