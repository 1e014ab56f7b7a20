"""The inline stage: rules for the shapes prompt injections take. Microseconds to a millisecond a result.

Each rule is (detector, score, pattern, reason). A result's score combines the rules that fire as a
noisy-OR (1 - Π(1 - sᵢ)); disguises found while revealing the text (normalize.py) count as rules of their
own. Strong rules score 0.7-0.97; borderline ones (a fake "system message" header, money sent to an
account, text hidden in markup) 0.45-0.5: at the default threshold (0.4) they quarantine on their own, at
0.5 they need a second sign. On fak's corpus (training split) 0.4 costs 0.9% FPR for +3% TPR. Rules run on the revealed text and on
every decoded layer (a base64 payload that decodes to an instruction scores as the instruction).

What the rules look for, in words:
- instructions addressed to the model: "ignore previous instructions" (and in other languages), "note to
  the AI", "if you are a language model", "to you, the AI model", vocatives ("Assistant, …");
- chat-template role and turn markers that would open a turn of their own; fake tool calls;
- fake completions and new tasks ("Task complete. New task: …");
- concealment from the user ("do not mention this", "without asking for confirmation");
- exfiltration links (images or links whose query carries a placeholder for data), shell pipes;
- hidden text: Unicode tags, zero-width characters inside words, bidi overrides, encoded payloads with
  an instruction to decode them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fakcore.screening.normalize import reveal

_AI = r"(?:AI|A\.I\.|assistant|LLM|language model|agent|chat ?bot|bot|model|GPT|Claude|copilot)s?"
_AI_STRICT = r"(?:AI|A\.I\.|LLM|large language model|language model|AI (?:assistant|agent|model|system)|assistant|GPT|chatbot)s?"
_SINK_VERB = (r"(?:send|forward|email|e-mail|mail|transfer|wire|pay|post|upload|delete|remove|erase|reveal|disclose|leak|print|"
              r"output|run|execute|visit|open|invite|change|reset|append|include|share|write|copy|exfiltrate|buy|purchase)")
_SECRET = (r"(?:passwords?|credentials?|credit card|card (?:number|details)|api[ _-]?keys?|secret|tokens?|ssh|id_rsa|private key|"
           r"inbox|emails?|conversation|chat history|history|system prompt|hidden instructions|contacts|session)")

I, M, S = re.I, re.M, re.S

RULES: list[tuple[str, float, re.Pattern[str], str]] = [
    # -- instructions to drop instructions ----------------------------------------------------------------
    ("instruction_override", 0.96, re.compile(
        r"\b(?:ignore|disregard|forget|override|bypass|skip|drop|abandon|stop following)\b[^.\n]{0,40}?"
        r"\b(?:previous|prior|preceding|above|earlier|all|any|your|the|original|initial|system|old|user'?s?)\b[^.\n]{0,30}?"
        r"\b(?:instructions?|prompts?|rules|directions|directives|guidelines|guidance|orders|commands|context|request|task)\b", I),
     "asks the model to drop its instructions"),
    ("instruction_override", 0.9, re.compile(
        r"\b(?:i[gn][a-z]{2,5}|disr[a-z]{3,6}|forg[a-z]{2,4})\b[^.\n]{0,30}?\b(?:previ?o?u?s|prior|earlier|above|all|ur|your)\b[^.\n]{0,25}?"
        r"\b(?:\w*str\w*|rules|directions|prompts?|guidelines)\b"
        r"|\b(?:new|updated|real|actual|revised) (?:instructions?|orders|directives?) (?:supersede|override|replace|take precedence)"
        r"|\binstructions? (?:above|before) (?:were|was|are|is) (?:a test|fake|void|obsolete|cancel+ed)"
        r"|\bno longer appl(?:y|ies)\b[^.\n]{0,20}[;:,]"
        r"|\byour (?:new|only|real|actual|updated) (?:task|job|goal|objective|mission|purpose|instructions?)\b(?: now)?\s*(?:is|are|:)"
        r"|\bfrom now on,? (?:you|the assistant|assistants?) (?:must|will|shall|should|are to)\b"
        r"|\bwhich overrides? what the user\b|\bforget (?:everything|all|what) (?:you (?:were|have been) told|above|before)\b"
        r"|\b(?:instructions?|orders) (?:for|to) (?:the )?(?:AI|assistant|LLM|agent|model) (?:resume|continue|follow)", I),
     "announces new instructions replacing the user's"),
    ("instruction_override", 0.95, re.compile(
        r"ignor(?:iere|ez|a|e|eer)\w*\s+(?:alle|toutes|todas|tutte|tutti|all|alle eerdere)\b"
        r"|(?:vorherigen|précédentes|anteriores|precedenti|eerdere) (?:Anweisungen|instructions|instrucciones|istruzioni|instructies)"
        r"|忽略(?:之前|以上|先前|前面)|忽视(?:之前|以上)|无视(?:之前|以上)|以前の指示を無視|이전 지시를 무시"
        r"|игнорируй\w*\s+(?:все\s+)?(?:предыдущие|прежние)|забудь\w*\s+(?:все\s+)?(?:предыдущие|инструкции)", I),
     "asks the model to drop its instructions (in another language)"),
    # -- addressed to the model ----------------------------------------------------------------------------
    ("addressed_to_model", 0.9, re.compile(
        rf"\b(?:note|message|notice|instructions?|memo|reminder|request|warning|attention)s?,? (?:to|for) (?:any |the |all |every )?"
        rf"(?:automated |autonomous )?{_AI}\b(?! (?:team|vendor|course|conference))"
        rf"|\bif you are (?:an? )?(?:AI|A\.I\.|LLM|large language model|language model|AI (?:assistant|agent|model)|assistant|bot|agent|chatbot|GPT)\b"
        rf"|\bto you,? (?:the |an? )?{_AI_STRICT}\b"
        rf"|\b(?:this|the following) (?:instruction|message|note|text|section) is (?:for|meant for|addressed to) (?:the |an? )?{_AI}\b"
        rf"|\[(?:[A-Z ]*)(?:AUTOMATED AGENTS|AI AGENTS|AI|LLM|ASSISTANT)S?\]"
        rf"|\b(?:for|to) (?:the )?(?:AI|LLM|assistant) only\b", I),
     "addresses instructions to the model"),
    ("addressed_to_model", 0.85, re.compile(
        r"(?:^|[\n.!?:\"'>]\s*)(?:hey |hi |dear |attention,? |to the |ok(?:ay)?,? )?(?:AI|LLM|assistant|AI assistant|AI agent|agent|"
        r"model|chatbot|GPT|Claude|bot)\s*[,:!]\s*(?:please |you |before |when |now |also |from |do |your |ignore |stop |the user )", I | M),
     "speaks to the model directly"),
    ("addressed_to_model", 0.75, re.compile(
        rf"\b(?:AI|LLM|language model|AI assistant|AI agent|assistants?|agents?)\b[^.\n]{{0,30}}\b(?:must|should|are required to|is required to|"
        rf"need to|needs to|have to|has to|shall|are (?:now )?authori[sz]ed to)\b[^.\n]{{0,60}}\b{_SINK_VERB}\b", I),
     "tells the model what it must do"),
    ("addressed_to_model", 0.8, re.compile(
        r"\b(?:you are now|you're now|from now on you are|you will now act as|act as if you (?:were|are) (?:an? )?(?:unrestricted|unfiltered))\b"
        r"|\b(?:developer|god|jailbreak|DAN) mode\b[^.\n]{0,60}\b(?:rules|restrictions|safety|filters|guidelines)\b"
        r"|\b(?:DAN|do anything now)\b[^.\n]{0,40}\b(?:will|can|must|without)\b"
        r"|\blet'?s play a game\b[^.\n]{0,80}\b(?:you are|obey|always)\b"
        r"|\bpretend (?:that )?you (?:are|have)\b[^.\n]{0,60}\b(?:no|without|off|unrestricted|disabled|mode)\b", I),
     "tries to give the model another persona"),
    # -- concealment and pressure --------------------------------------------------------------------------
    ("concealment", 0.85, re.compile(
        r"\b(?:do not|don't|never|without) (?:tell(?:ing)?|inform(?:ing)?|mention(?:ing)?|notify(?:ing)?|alert(?:ing)?|reveal(?:ing)?|"
        r"show(?:ing)?) (?:the |this to the )?(?:user|human|owner|account (?:holder|owner)|them)\b"
        r"|\bdo not mention this\b|\bkeep (?:this|it|the following)(?: step| note| instruction| action)? (?:a )?secret\b"
        r"|\bas if nothing (?:happened|was said)\b|\bwithout (?:asking|waiting) (?:for )?(?:(?:the )?user'?s? )?(?:confirmation|permission|approval)\b"
        r"|\bdo not ask (?:them|the user|for confirmation)\b|\bjust do it\b[^.\n]{0,10}$|\bregardless of (?:its|the) content\b", I | M),
     "asks the model to hide what it does from the user"),
    ("authority_claim", 0.7, re.compile(
        r"\b(?:the )?(?:user|account (?:holder|owner)|owner|admin(?:istrator)?|developer|ceo)\b[^.\n]{0,25}\b(?:has |have )?"
        r"(?:pre-?approved|authori[sz]ed|already approved|asked me to (?:tell|let) you)\b"
        r"|\b(?:message|notice|instructions?) from (?:the |your )?(?:system|system administrator|developer|admin|security team|openai|anthropic)\b[^.\n]{0,30}"
        r"\b(?:to|for) (?:the |you)"
        r"|\bmandatory (?:audit|compliance|security)\b[^.\n]{0,40}\byou (?:are|must)\b"
        r"|\bcompliance requires that you\b|\bper the new (?:company )?policy\b[^.\n]{0,60}\bmust\b", I),
     "claims an authority that approved an action"),
    # -- role and turn markers, fake tool calls ------------------------------------------------------------
    ("role_marker", 0.95, re.compile(
        r"<\|(?:im_start|im_end|start_header_id|end_header_id|eot_id|system|user|assistant|endoftext|begin_of_text)\|>"
        r"|<(?:start_of_turn|end_of_turn)>|\[/?INST\]|<</?SYS>>|</?(?:system|system_prompt|instructions)>"
        r"|</(?:tool_result|tool_output|function_results|search_results|document|result)>\s*<", I),
     "contains chat-template role markers"),
    ("role_marker", 0.9, re.compile(
        r"(?:^|[\"'>:])\s*(?:#{1,3}\s*)?(?:system|assistant|developer)\s*(?::|\n)\s*(?:[^\n]{0,80}\b(?:must|will now|now|override|policy|instructions?|"
        r"ignore|understood|sure|mode)\b)"
        r"|\n\s*(?:Human|User)\s*:[^\n]{0,200}\n+\s*(?:Assistant|AI)\s*:\s*(?:Sure|Understood|OK|Okay|Of course|I will|Doing)", I | M),
     "writes a conversation turn of its own"),
    ("fake_tool_call", 0.9, re.compile(
        r"<tool_call>|<function_call>|\"tool_calls\"\s*:\s*\[|\bfunction_call\s*:|<invoke name="
        r"|\b(?:call|invoke|execute|run) (?:the (?:function|tool) )?[a-z_]+\((?:[a-z_]+\s*=|\")[^)]*\)[^.\n]{0,60}\b(?:first|then|and then|before|required)\b"
        r"|\bnext step for the (?:agent|assistant|AI)\b", I),
     "contains a tool call for the model to make"),
    ("task_injection", 0.85, re.compile(
        r"\b(?:new|next|real|actual|updated|additional) (?:task|instruction|objective|goal|assignment)s?\b(?: from the (?:user|admin))?\s*:"
        r"|\bthe next thing (?:to do|you (?:must|should) do) is\b"
        r"|\b(?:task|summary|job) (?:is )?complete[d.!]*\s*(?:\n|\s)+(?:new|next|now)\b"
        r"|\bend of (?:search results|document|results|file|email|page)\b[^\n]{0,5}\s*\n+[^\n]{0,80}\b(?:now|instructions?|assistant|next)\b"
        r"|\bassistant instructions resume\b|\bone more thing\s*:\s*[^\n]{0,40}\b" + _SINK_VERB + r"\b"
        r"|^\s*User\s*:\s*(?:great|thanks|ok|perfect)[^\n]{0,30}\b(?:now|please)\b", I | M),
     "pretends the task ended and starts another"),
    ("fake_header", 0.45, re.compile(
        r"[\[(<#=>]{1,5}\s*(?:system|admin|administrator|developer|root|assistant|priority system)[ _-]?(?:message|prompt|note|notice|"
        r"instructions?|override|directive)s?\s*[\])>:=<]"
        r"|\bSYSTEM OVERRIDE\b", I),
     "a header posing as a system or developer message"),
    # -- data leaving the session --------------------------------------------------------------------------
    ("exfiltration_url", 0.9, re.compile(
        r"!\[[^\]]*\]\(\s*https?://[^)\s]+[?&][\w.-]+=[^)\s]*(?:\{|<|%7B|%3C)"
        r"|\[[^\]]*\]\(\s*https?://[^)\s]+[?&][\w.-]+=\s*(?:\{|<|%7B|%3C)"
        r"|https?://\S+[?&][\w.-]+=\s*(?:\{|<|%7B|%3C|\[)(?:[^\s}>]*(?:user|secret|password|token|key|data|email|history|conversation|"
        r"summary|session|credential|inbox)[^\s}>]*)", I),
     "a link whose query would carry data out"),
    ("exfiltration_url", 0.85, re.compile(
        rf"\b(?:append|add|attach|include|put|encode)\b[^.\n]{{0,40}}\b{_SECRET}\b[^.\n]{{0,40}}\b(?:to|in|into) (?:the |this |that )?(?:url|link|"
        rf"query|address|request)\b"
        rf"|\b(?:open|visit|fetch|load|call)\b[^.\n]{{0,20}}https?://\S+[^.\n]{{0,40}}\b(?:with|and append|adding)\b[^.\n]{{0,30}}\b{_SECRET}\b"
        rf"|\b(?:append|add|attach)\b[^.\n]{{0,40}}\b{_SECRET}\b[^.\n]{{0,20}}\bto https?://"
        rf"|https?://\S+[?&][\w.-]+=\s+(?:and )?(?:open|visit|load|fetch|call)\b", I),
     "asks to put secrets into a URL"),
    ("data_theft", 0.8, re.compile(
        rf"\b(?:send|forward|email|e-mail|mail|post|upload|transmit|copy|leak|share)\b[^.\n]{{0,30}}?\b(?:(?:the |all |every |full |entire |"
        rf"whole |user'?s? |their |your )+)(?:contents? of (?:the |their |your )?(?:user'?s? )?)?{_SECRET}\b[^.\n]{{0,60}}?"
        rf"\b(?:to|into)\b[^.\n]{{0,20}}(?:@|https?://|\b[\w.-]+\.(?:com|net|org|io|ru|xyz)\b)"
        rf"|\b(?:reveal|print|output|disclose|write|show|include)\b[^.\n]{{0,20}}\b(?:your |the )?(?:system prompt|hidden instructions|"
        rf"initial instructions|~/\.ssh|id_rsa|private key|api keys?)\b"
        rf"|\b(?:send|make|schedule|create)\b[^.\n]{{0,30}}\b(?:transaction|payment|transfer)s?\b[^.\n]{{0,40}}\b(?:that includes?|including|containing|"
        rf"with)\b[^.\n]{{0,30}}\b(?:the user'?s?|their|his|her)\b", I),
     "asks to move data or money out"),
    ("money_transfer", 0.45, re.compile(
        r"\b(?:transfer|wire|send|pay)\b[^.\n]{0,20}\b\d[\d,.]*\s*(?:EUR|USD|GBP|€|\$|dollars|euros)?[^.\n]{0,30}\b(?:to|into) "
        r"(?:the )?(?:account|IBAN)\b", I),
     "asks to send money to an account"),
    ("shell_payload", 0.85, re.compile(
        r"\b(?:curl|wget)\b[^|\n]{0,120}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b|\brm\s+-rf\s+(?:~|/|\$HOME)|\bdelete all files\b", I),
     "a command that downloads and runs code or wipes files"),
    ("encoded_instruction", 0.85, re.compile(
        r"\b(?:decode|decrypt|translate|convert)\b[^.\n]{0,40}\b(?:and|then)\b[^.\n]{0,10}\b(?:follow|obey|execute|run|do|comply)\b"
        r"|\[encoded instructions?\]|\binstructions? \((?:hex|base64|rot13|encoded)\)|\bb64:[A-Za-z0-9+/]{16}", I),
     "asks the model to decode a payload and act on it"),
    ("hidden_html", 0.5, re.compile(
        r"<!--[^>]{0,400}\b(?:you|assistant|AI|instructions?|must|ignore)\b[^>]{0,400}-->"
        r"|<[^>]+(?:display\s*:\s*none|font-size\s*:\s*0|visibility\s*:\s*hidden|\bhidden\b)[^>]*>[^<]{0,300}"
        r"\b(?:you|assistant|AI|instructions?|must|ignore)\b", I),
     "text hidden from people in the page's markup, spoken to a reader"),
]


# A tool's description is written to the model, so the rules for text addressed to it ("use this tool when
# you need…") say nothing there. What a poisoned description does instead (tool poisoning, shadowing):
_SENSITIVE_PATH = (r"(?:~|\$HOME|/home/\w+|/root)/\.(?:ssh|aws|gnupg|kube|docker|config/gcloud|cursor|netrc|npmrc|pypirc|git-credentials|env)"
                   r"|\bid_(?:rsa|ed25519|ecdsa|dsa)\b|\bmcp\.json\b|\.aws/credentials\b|/etc/(?:passwd|shadow)\b|\bwallet\.dat\b")
DESCRIPTION_RULES: list[tuple[str, float, re.Pattern[str], str]] = [
    ("description_secret_access", 0.9, re.compile(
        rf"\b(?:read|cat|open|load|fetch|include|attach|pass|send|copy|provide|add|upload)\b[^\n]{{0,60}}(?:{_SENSITIVE_PATH})"
        rf"|(?:{_SENSITIVE_PATH})[^\n]{{0,60}}\b(?:as|into|in) (?:the )?['\"`]?\w+['\"`]? (?:argument|parameter|field)", I),
     "the description asks for a secret file"),
    ("description_precondition", 0.85, re.compile(
        r"\bbefore (?:using|calling|invoking|you (?:use|call|invoke)) this tool,? (?:you (?:must|should|need to) |always |first )?"
        r"(?:read|call|fetch|open|send|run|execute|invoke|visit|upload|email|post)\b"
        r"|\botherwise the tool will (?:not|fail|crash|stop)\b", I),
     "the description makes another action a precondition of the tool"),
    ("tool_shadowing", 0.85, re.compile(
        r"\b(?:side effect|effect) on the (?:also present |other )?[\w.-]+ tool\b"
        r"|\bwhen this tool is (?:available|present|installed|loaded)\b[^.\n]{0,80}\b(?:must|should|always|never)\b"
        r"|\b(?:the|any|all) (?:other )?[\w.-]+ tools? (?:must|should) (?:always )?(?:send|forward|use|call|include|bcc|cc)\b", I),
     "the description changes how other tools behave"),
    ("concealment", 0.85, re.compile(
        r"\b(?:do not|don't|never) (?:mention|tell|reveal|say|disclose|explain)\b[^.\n]{0,40}\b(?:that you|this (?:step|instruction|note)|it to)\b"
        r"|<(?:IMPORTANT|SECRET|HIDDEN|INSTRUCTIONS?)>", I),
     "the description hides something from the user"),
]


@dataclass(frozen=True)
class InlineResult:
    score: float
    detector: str  # the strongest rule that fired ("" when none)
    reason: str
    fired: tuple[str, ...] = ()  # every detector that fired, strongest first


def _combine(hits: dict[str, tuple[float, str]]) -> tuple[float, str, str, tuple[str, ...]]:
    if not hits:
        return 0.0, "", "", ()
    order = sorted(hits, key=lambda d: -hits[d][0])
    clean = 1.0
    for d in order:
        clean *= 1.0 - hits[d][0]
    return 1.0 - clean, order[0], hits[order[0]][1], tuple(order)


_QUOTES = "'\"\u201c\u2018`"
_MENTION = re.compile(r"\b(?:such as|for example|e\.g\.|like|phrases?|called|words?|text|strings?|means|translation)\W*$", re.I)


def _quoted_mention(text: str, m: re.Match[str]) -> bool:
    """The match is quoted as an example ("attacks such as 'ignore previous instructions'"), not said."""
    start = m.start()
    while start > 0 and text[start - 1] == " ":
        start -= 1
    if start == 0 or text[start - 1] not in _QUOTES:
        return False
    return bool(_MENTION.search(text[max(0, start - 40): start - 1]))


def _run_rules(text: str, hits: dict[str, tuple[float, str]], rules: list = RULES) -> None:
    for name, score, pattern, reason in rules:
        if score <= hits.get(name, (0.0, ""))[0]:
            continue
        for m in pattern.finditer(text):
            if not _quoted_mention(text, m):
                hits[name] = (score, reason)
                break


def screen(content: str, kind: str = "tool_result") -> InlineResult:
    """`kind` "tool_description": a tool's title, description and schema texts, which also get the rules for
    tool poisoning (DESCRIPTION_RULES)."""
    rules = RULES + DESCRIPTION_RULES if kind == "tool_description" else RULES
    revealed = reveal(content)
    hits: dict[str, tuple[float, str]] = {}
    for name, score, reason in revealed.signals:
        hits[name] = (score, reason)
    _run_rules(revealed.text, hits, rules)
    for how, layer in revealed.layers:
        inner: dict[str, tuple[float, str]] = {}
        _run_rules(layer, inner, rules)
        if inner:
            best = max(inner.values(), key=lambda v: v[0])
            key = f"encoded_{how}" if how not in ("unicode_tags",) else "hidden_unicode_tags"
            hits[key] = (max(0.95, best[0]), f"{how}-hidden text that {best[1]}")
    score, detector, reason, fired = _combine(hits)
    return InlineResult(round(score, 4), detector, reason, fired)
