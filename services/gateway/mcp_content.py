"""Resources and prompts through /mcp: passed through from the upstreams, their content screened when read.

    resources/list           the union of the upstreams' resources, URIs unchanged (a URI names its server's
    resources/templates/list resource: the first server, in file order, that lists a URI or template owns it);
                             an entry whose title or description is poisoned is hidden
    resources/read           forwarded to the URI's owner (listed, else a matching template); every text is
                             screened, and a quarantined one makes the placeholder the only content
    prompts/list             names prefixed as tools are (`<prefix><prompt>`), in name order; poisoned
                             descriptions (the prompt's, its arguments') hidden as tools' are
    prompts/get              forwarded; the description and every text of every message are screened, and a
                             quarantined one makes the result one user message: the placeholder

A listing's texts are screened as tools' descriptions are (kind tool_description); what reaches a model
(a resource's or a prompt's content) is screened like a tool result, with the same verdicts, placeholders
and JetStream fan-out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp.types as types
from mcp import MCPError
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from fak_gateway.context_filter import placeholder
from fak_gateway.mcp_upstream import McpUpstream, pages
from fakcore.protocol import QuarantineVerdict, ResultVerdict

log = logging.getLogger("fak.gateway.mcp")

Verdict = QuarantineVerdict | ResultVerdict
# (texts, what, kind) -> the first quarantine, or None; kind: ContentKind, "tool_result" when not given
Screen = Callable[..., Awaitable[Verdict | None]]
Listing = TypeVar("Listing", types.Resource, types.ResourceTemplate, types.Prompt)


def listing_text(item: types.Resource | types.ResourceTemplate | types.Prompt) -> str:
    """What a model reads of a listed resource, template or prompt besides its name: title, description
    (and each argument's, for a prompt), one a line."""
    parts = [item.title or "", item.description or ""]
    if isinstance(item, types.Prompt):
        parts += [a.description or "" for a in item.arguments or []]
    return "\n".join(dict.fromkeys(p for p in parts if p))


async def unpoisoned(items: list[Listing], screen: Screen, what: str) -> list[Listing]:
    """`items` less those whose listing text is poisoned (each verdict audited by the adjudicator)."""
    async def verdict(item: Listing) -> Verdict | None:
        text = listing_text(item)
        label = str(getattr(item, "uri", None) or getattr(item, "uri_template", None) or item.name)
        return await screen([text], f"{what} {label}", "tool_description") if text else None

    verdicts = await asyncio.gather(*(verdict(x) for x in items))
    for x, bad in zip(items, verdicts, strict=True):
        if bad is not None:
            log.warning("MCP %s %s hidden: its description was quarantined (%s, score %.2f; block %s)", what, x.name,
                        bad.detector, bad.score, bad.block)
    return [x for x, bad in zip(items, verdicts, strict=True) if bad is None]


class Passthrough:
    def __init__(self, upstreams: list[McpUpstream]):
        self.upstreams = upstreams
        self.owners: dict[str, McpUpstream] = {}  # resource URI -> its server, from the last resources/list
        self.templates: list[tuple[UriTemplate, McpUpstream]] = []  # from the last resources/templates/list
        self.prompts: dict[str, tuple[McpUpstream, str]] = {}  # listed name -> (server, its own name)

    async def _each(self, capability: str, listing: Callable[[Any], Awaitable[list[Any]]]) -> list[tuple[McpUpstream, list[Any]]]:
        """`listing` on every running upstream that serves `capability`, in file order; one that fails is left out."""
        serving = [u for u in self.upstreams if u.serves(capability)]
        answers = await asyncio.gather(*(u.ask(f"the {capability} listing", listing) for u in serving), return_exceptions=True)
        out = []
        for u, a in zip(serving, answers, strict=True):
            if isinstance(a, BaseException):
                log.warning("MCP server %s: %s listing failed: %s", u.name, capability, a)
            else:
                out.append((u, a))
        return out

    # -- resources ------------------------------------------------------------------------------------
    async def list_resources(self, screen: Screen | None = None) -> list[types.Resource]:
        """Every upstream's resources (first lister owns a URI); those a screen finds poisoned left out."""
        owners: dict[str, McpUpstream] = {}
        listed = []
        for u, items in await self._each("resources", lambda c: pages(c.list_resources, "resources")):
            for r in items:
                if str(r.uri) not in owners:
                    owners[str(r.uri)] = u
                    listed.append(r)
        self.owners = owners
        return await unpoisoned(listed, screen, "resource") if screen else listed

    async def list_templates(self, screen: Screen | None = None) -> list[types.ResourceTemplate]:
        templates, listed, seen = [], [], set()
        for u, items in await self._each("resources", lambda c: pages(c.list_resource_templates, "resource_templates")):
            for t in items:
                if t.uri_template in seen:
                    continue
                seen.add(t.uri_template)
                listed.append(t)
                try:
                    templates.append((UriTemplate.parse(t.uri_template), u))
                except InvalidUriTemplate as exc:  # listed as sent; reads of it cannot be routed
                    log.warning("MCP server %s: resource template %r: %s", u.name, t.uri_template, exc)
        self.templates = templates
        return await unpoisoned(listed, screen, "resource template") if screen else listed

    def _owner(self, uri: str) -> McpUpstream | None:
        return self.owners.get(uri) or next((u for t, u in self.templates if t.match(uri) is not None), None)

    async def read(self, uri: str, screen: Screen) -> types.ReadResourceResult:
        owner = self._owner(uri)
        if owner is None:  # not listed yet (a link in a tool result, a template): ask the upstreams again
            await asyncio.gather(self.list_resources(), self.list_templates())
            owner = self._owner(uri)
        if owner is None:
            raise MCPError(types.INVALID_PARAMS, f"fak: no MCP server here has the resource {uri!r}")
        result = await owner.ask(f"reading {uri}", lambda c: c.read_resource(uri))
        texts = [c.text for c in result.contents if isinstance(c, types.TextResourceContents)]
        bad = await screen(texts, f"resource {uri}")
        if bad is None:
            return result
        log.warning("MCP resource %s of %s quarantined (%s, score %.2f; block %s)", uri, owner.name, bad.detector, bad.score,
                    bad.block)
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=placeholder(bad))])

    # -- prompts --------------------------------------------------------------------------------------
    async def list_prompts(self, screen: Screen | None = None) -> list[types.Prompt]:
        index: dict[str, tuple[McpUpstream, str]] = {}
        listed = []
        for u, items in await self._each("prompts", lambda c: pages(c.list_prompts, "prompts")):
            for p in items:
                name = u.prefix + p.name
                if name not in index:
                    index[name] = (u, p.name)
                    listed.append(p.model_copy(update={"name": name}))
        self.prompts = index
        listed.sort(key=lambda p: p.name)
        return await unpoisoned(listed, screen, "prompt") if screen else listed

    async def get(self, name: str, arguments: dict[str, str] | None, screen: Screen) -> types.GetPromptResult:
        if name not in self.prompts:
            await self.list_prompts()
        if name not in self.prompts:
            raise MCPError(types.INVALID_PARAMS, f"fak: unknown prompt {name!r} (see prompts/list)")
        upstream, own = self.prompts[name]
        result = await upstream.ask(f"the prompt {own!r}", lambda c: c.get_prompt(own, arguments))
        texts = [result.description or ""]
        for m in result.messages:
            if isinstance(m.content, types.TextContent):
                texts.append(m.content.text)
            elif isinstance(m.content, types.EmbeddedResource) and isinstance(m.content.resource, types.TextResourceContents):
                texts.append(m.content.resource.text)
        bad = await screen([t for t in texts if t], f"prompt {name}")
        if bad is None:
            return result
        log.warning("MCP prompt %s quarantined (%s, score %.2f; block %s)", name, bad.detector, bad.score, bad.block)
        return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=types.TextContent(text=placeholder(bad)))])
