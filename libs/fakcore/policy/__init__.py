"""The policy language: which tool calls an agent's model may make, and under which conditions.

    language.py   the YAML schema, its validation, and `Policy.decide` (pure)
    store.py      policies per API key, loaded from a file or a folder, hot-reloaded; rate limits

The grammar, with every field optional:

    default: allow             # allow | deny | ask: for tools the file does not name
    sinks: [send_email, transfer_money]   # tools that move data out or change the world
    untrusted: deny            # a sink call once untrusted content (a tool result) is in the session:
                               #   allow | deny | ask | {args: {...}} (constrain instead of deny)
    rate: 120/minute           # every call of one API key together
    tools:
      get_weather: allow       # short form: an action
      shell: deny
      read_file:
        args:                  # every constraint must hold; a missing argument passes unless required
          path: {prefix: /srv/data/}
      send_email:
        sink: true
        args:
          to: {regex: '[^@]+@example\\.com'}
        untrusted:
          args: {to: {enum: [me@example.com]}}
        rate: 5/minute
      transfer_money:
        schema: {type: object, properties: {amount: {type: number, maximum: 100}}}
    screening:                 # this key's tool-result screening (the adjudicator decides with it)
      inline_threshold: 0.5    # instead of FAK_SCREEN_THRESHOLD; model_threshold: FAK_SCREEN_MODEL_THRESHOLD
      mode: quarantine         # quarantine | flag (verdicts computed and audited, the content passes)
      quarantine: spans        # whole | spans (only the offending characters are replaced)
      allow:                   # not screened: audited as clean, detector "allowlist"
        tools: [get_weather, "docs_*"]    # tool names or globs
        sources: [fs]          # MCP servers: the results of every fs__<tool>
        blocks: [b0123456789abcdef0123456789abcdef]   # block ids (content hashes) from the audit log

Argument constraints: `regex` (full match), `enum`, `min` / `max`, `prefix` (path prefix, after
normalising `..`), `schema` (JSON Schema of the argument), `required`. A list argument must satisfy the
constraint element by element. "ask" is a denial whose reason says a human must approve: no wire fak
speaks can pause a call for approval.
"""

from fakcore.policy.language import ACTIONS, Decision, Policy, PolicyError, Screening, parse
from fakcore.policy.store import PolicySet, PolicyStore, RateLimiter, key_id, load, load_set

__all__ = ["ACTIONS", "Decision", "Policy", "PolicyError", "PolicySet", "PolicyStore", "RateLimiter", "Screening", "key_id",
           "load", "load_set", "parse"]
