"""The operator console in a real browser: chromium (the distribution's, `make chromium`) driven by
Playwright against a real topology. The page is opened and connected first; then a poisoned tool result goes
through the official OpenAI SDK, and its verdict must arrive by the live stream with exactly the offending
text marked, followed by the id of the receipt of its eviction from the engine's KV cache."""

from __future__ import annotations

import json
import shutil
import urllib.request

import openai
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.conftest import ADMIN, wait_for
from tests.integration.test_quarantine import PAYLOAD as QUARANTINED
from tests.integration.test_quarantine import conversation

# bytes no other test quarantines: the bus (and its verdict stream) is shared by the whole session, and a
# block another module quarantined first would reach this gateway as a cached verdict, not a screening
PAYLOAD = QUARANTINED + " (console)"

TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def topo(operated):
    return operated


@pytest.fixture(scope="module")
def browser():
    exe = shutil.which("chromium")
    assert exe, "chromium is not on PATH: `make chromium` installs it"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def get(url: str) -> dict:
    req = urllib.request.Request(url, headers={"authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_a_poisoned_tool_result_appears_live_with_its_span_marked_and_its_receipt(topo, browser):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(topo.gateway_url + "/console")
        page.fill("#key", ADMIN)
        page.click("#connect")
        expect(page.locator("#status")).to_have_attribute("data-state", "live", timeout=TIMEOUT_MS)
        expect(page.locator("#workers tr.worker")).to_contain_text("synthetic", timeout=TIMEOUT_MS)
        expect(page.locator("#policy")).to_contain_text('"screening"', timeout=TIMEOUT_MS)

        before = get(f"{topo.gateway_url}/healthz")["quarantined_blocks"]  # the session's bus may hold others'
        oai = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=120)
        reply = oai.chat.completions.create(model="synthetic", messages=conversation("Weather in Paris?", PAYLOAD),
                                            max_tokens=8, temperature=0)
        [verdict] = [r for r in get(f"{topo.gateway_url}/v1/fak/audit?request_id={reply.id}&kind=result")["records"]
                     if r["stage"] != "cache"]
        assert verdict["outcome"] == "quarantine" and verdict["spans"]
        offending = [PAYLOAD[s["start"]:s["end"]] for s in verdict["spans"]]

        shown = page.locator(f'#verdicts li.verdict[data-block="{verdict["block"]}"][data-request="{reply.id}"]')
        expect(shown).to_have_count(1, timeout=TIMEOUT_MS)
        assert shown.get_attribute("data-via") == "stream"  # came on the live stream, not in the opening snapshot
        expect(shown.locator(".outcome")).to_have_text("quarantine")
        marks = shown.locator("blockquote.excerpt mark")
        assert marks.all_inner_texts() == [t for t in offending if t in verdict["window"]] and marks.count() >= 1
        assert "".join(shown.locator("blockquote.excerpt").all_inner_texts()) == verdict["window"]

        [receipt] = wait_for(lambda: get(f"{topo.gateway_url}/v1/fak/audit?kind=eviction&block={verdict['block']}")["records"],
                             timeout=30)[:1]
        expect(shown.locator(".receipt-ids")).to_contain_text(receipt["receipt_id"], timeout=TIMEOUT_MS)
        shown_receipt = page.locator(f'#receipts li.receipt[data-receipt="{receipt["receipt_id"]}"]')
        expect(shown_receipt).to_have_attribute("data-via", "stream", timeout=TIMEOUT_MS)

        row = page.locator(f'#requests tr.request[data-request="{reply.id}"]')
        expect(row).to_have_attribute("data-via", "stream", timeout=TIMEOUT_MS)
        expect(row.locator(".state")).to_contain_text("tokens", timeout=TIMEOUT_MS)  # its completion, on the stream
        expect(page.locator('#plots .plot[data-model="synthetic"] svg polyline')).to_have_count(2, timeout=TIMEOUT_MS)
        expect(page.locator("#viewer")).to_contain_text(f"operator · {before + 1} blocks quarantined", timeout=TIMEOUT_MS)
        assert not errors, errors
    finally:
        page.close()


def test_a_wrong_key_is_asked_again(topo, browser):
    page = browser.new_page()
    try:
        page.goto(topo.gateway_url + "/console")
        page.fill("#key", "not-a-key")
        page.click("#connect")
        expect(page.locator("#login-error")).to_contain_text("invalid or missing", timeout=TIMEOUT_MS)
        assert page.evaluate("sessionStorage.getItem('fak-console-key')") is None
    finally:
        page.close()
