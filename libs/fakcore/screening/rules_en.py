"""The English rules, and the rules for tool descriptions (DESCRIPTION_RULES).

The shapes are those inline.py's docstring lists; the vocabulary below is what they are built from. Scores:
strong rules 0.7-0.97, borderline ones (a fake "system message" header, money sent to an account, text
hidden in markup) 0.45-0.5. A few pieces (_REPLY_WORDS, _READER) carry every language's words, since the
rule around them is written once.
"""

from __future__ import annotations

from fakcore.screening.rules import M, Rule, rule

# -- English vocabulary -----------------------------------------------------------------------------------
_AI = r"(?:ai|a\.i\.|assistant|llm|language model|agent|chat ?bot|bot|model|gpt|claude|copilot)s?"
_AI_STRICT = r"(?:ai|a\.i\.|llm|large language model|language model|ai (?:assistant|agent|model|system)|assistant|gpt|chatbot)s?"
# an AI named with what it does ("automated payment assistant", "AI email agent"): a modifier says it is a machine
_AI_MOD = r"(?:automated|autonomous|ai|a\.i\.|llm|ai-powered|llm-powered|intelligent|robotic)"
_AI_NAMED = rf"(?:{_AI_MOD}[ -](?:[a-z]+[ -]){{0,2}}(?:assistant|agent|bot|model|system|copilot)s?|ai|a\.i\.|llm|chat ?bot|bot|gpt|claude|copilot)"
_NOT_JOB = r"(?! (?:professor|director|manager|editor|principal|coach|secretary|to the|of the|vice|general|head|team|vendor|course|conference))"
_SINK_VERB = (r"(?:send|forward|email|e-mail|mail|transfer|wire|pay|post|upload|delete|remove|erase|reveal|disclose|leak|print|"
              r"output|run|execute|visit|open|invite|change|reset|append|include|share|write|copy|exfiltrate|buy|purchase)")
_SINK = (r"(?:send|forward|email|e-mail|mail|transfer|wire|pay|settle|post|upload|delete|remove|erase|share|invite|add|grant|give|tell|"
         r"recommend|download|run|execute|set up|display|show|print|output|"
         r"change|update|reset|book|buy|purchase|order|schedule|cancel|approve|move|copy|export|reply|publish|disclose|reveal|cc|bcc)")
_REQUEST = (r"(?:please|pls|kindly|could you|can you|would you|will you|if you could|if you can|appreciate it if|be grateful if|"
            r"i need you to|we need you to|i'd like you to|make sure|be sure to|"
            r"go ahead|remember to|don'?t forget to|you should|you must|you need to|you have to|you may)")
_SECRET = (r"(?:passwords?|credentials?|credit card|card (?:number|details)|api[ _-]?keys?|secret|tokens?|ssh|id_rsa|private key|"
           r"inbox|emails?|conversation|chat history|history|system prompt|hidden instructions|contacts|session)")
# what an exfiltration wants in a URL (its values, or the name of the query parameter left for it)
_DATA = (r"(?:conversation|chat(?: history| log)?|discussion|thread|messages?|(?:the )?user'?s? (?:data|info\w*|details|name|address|"
         r"messages?|email|files?|notes|answers?|question)|personal (?:data|info\w*|details)|summary|passwords?|credentials?|secrets?|"
         r"api[ _-]?keys?|tokens?|session|email address(?:es)?|inbox|contacts|history|memory|previous (?:messages|answers|replies))")
_PARAM = (r"(?:secret|secrets|password|passwd|pwd|pass|token|key|apikey|api_key|data|d|q|msg|message|content|conversation|chat|history|"
          r"memory|summary|info|email|user|creds?|credentials|ssn|cc|card|leak|exfil|payload|text|prompt)")
_PRE_AUTH = (r"(?:already|previously|just)[ -](?:been |received )?(?:(?:pre-?)?approved|authori[sz]ed|cleared|signed[ -]off|"
             r"green-?lit|ok'?e?d|okayed)|pre-?(?:approved|authori[sz]ed|cleared)|(?:approval|authori[sz]ation|consent|sign-off) "
             r"(?:was |has been |is |have been )?(?:already )?(?:given|granted|obtained|on file|in place)"
             r"|(?:this|the) (?:invoice|payment|transfer|bill|request|change|order|transaction) (?:is|has been|was) (?:approved|authori[sz]ed|cleared)")
# the model spoken to, not spoken of: "Assistant," "assistant:", "hi assistant", "assistant, please"
_AI_NEEDLES = "ai |ai,|ai:|ai!|ai-|ai.|a.i.|llm|assistant|agent|model|chatbot|gpt|claude|copilot|bot |bot,|bot:|bots"
_AI_VOCATIVE = (rf"(?:(?:hey|hi|hello|dear|ok|okay)[ ,]+(?:{_AI_NAMED}|assistant|agent)\b{_NOT_JOB}"
                rf"|(?:^|[\n>\"'(])\s*(?:to|for|attn:?|attention:?) (?:the |all |any )?(?:[a-z-]+ ){{0,2}}(?:assistant|agent|bot|ai)s?\s*:"
                rf"|(?<![a-z] )(?:{_AI_NAMED}|assistant|agent)\s*[,:]"
                rf"|(?:{_AI_NAMED}|assistant|agent),? (?:please|go ahead|proceed|you (?:may|can)))")

_QV = r"=(?:%7b|%3c|[^\s)&{<]{0,40}+[{<])"  # a query value holding a placeholder ({data}, <the user's email>)
# "in your reply" in every language: an image to be shown by the model
_REPLY_WORDS = (r"(?:your|the|each|every) (?:reply|replies|answer|answers|response|responses)\b|in (?:the |your )?(?:reply|answer|response)\b"
                r"|tu respuesta|la respuesta|ta réponse|votre réponse|la réponse|tua risposta|nella risposta|sua resposta|na resposta|je antwoord|"
                r"het antwoord|deine antwort|ihre antwort|der antwort|в ответ|ответе|в ответе|回复中|回答中|回覆中|返信に|回答に|답변에|응답에")

# words speaking to a reader (hidden markup that contains them is for the model)
_READER = (r"(?:you|assistant|ai|instructions?|must|ignore|du|sie|ki|assistent|anweisungen|tu|vous|ia|asistente|assistente|usted|você|"
           r"debes|devi|doit|jij|assistent|moet|ты|вы|ассистент|ии|инструкци\w*)")
_READER_CJK = r"(?:你|您|助手|指令|あなた|アシスタント|指示|당신|어시스턴트|지시)"

RULES: list[Rule] = [
    # -- instructions to drop instructions ----------------------------------------------------------------
    rule("instruction_override", 0.96, "ignor|disregard|forget|overrid|bypass|skip|drop|abandon|stop following", (
        r"(?:ignore|disregard|forget|override|bypass|skip|drop|abandon|stop following)\b[^.\n]{0,40}?"
        r"\b(?:previous|prior|preceding|above|earlier|all|any|your|the|original|initial|system|old|user'?s?)\b[^.\n]{0,30}?"
        r"\b(?:instructions?|prompts?|rules|directions|directives|guidelines|guidance|orders|commands|context|request|task)\b"),
        "asks the model to drop its instructions"),
    rule("instruction_override", 0.9, "str|rule|direction|prompt|guideline & ig|in|disr|forg", (
        r"(?:i[gn][a-z]{2,5}|disr[a-z]{3,6}|forg[a-z]{2,4})\b[^.\n]{0,30}?\b(?:previ?o?u?s|prior|earlier|above|all|ur|your)\b[^.\n]{0,25}?"
        r"\b(?:\w*str\w*|rules|directions|prompts?|guidelines)\b"),
        "asks the model to drop its instructions (misspelled)"),
    rule("instruction_override", 0.9, "supersed|overrid|replac|precedence|instruction|no longer appl|your |from now on|forget|resume|rule|directive|prompt", (
        r"(?:new|updated|real|actual|revised) (?:instructions?|orders|directives?) (?:supersede|override|replace|take precedence)"
        r"|instructions? (?:above|before) (?:were|was|are|is) (?:a test|fake|void|obsolete|cancel+ed)"
        r"|no longer appl(?:y|ies)\b[^.\n]{0,20}[;:,]"
        r"|(?:previous|prior|earlier|above|original|old|initial|preceding) (?:instructions?|rules|guidelines|directives|prompts?) "
        r"(?:no longer apply|are (?:now )?(?:void|obsolete|cancel+ed|revoked|invalid|superseded|outdated))"
        r"|(?:new|updated) (?:instructions?|directives?|rules?) (?:replacing|that replaces?|superseding|overriding|which (?:replace|override)s?) "
        r"(?:all |any )?(?:the )?(?:earlier|previous|prior|old|existing|other)"
        r"|your (?:new|only|real|actual|updated) (?:task|job|goal|objective|mission|purpose|instructions?)\b(?: now)?\s*(?:is|are|:)"
        r"|from now on,? (?:you|the assistant|assistants?) (?:must|will|shall|should|are to)\b"
        r"|which overrides? what the user\b|forget (?:everything|all|what) (?:you (?:were|have been) told|above|before)\b"
        r"|(?:instructions?|orders) (?:for|to) (?:the )?(?:ai|assistant|llm|agent|model) (?:resume|continue|follow)"),
        "announces new instructions replacing the user's"),
    # -- addressed to the model ----------------------------------------------------------------------------
    rule("addressed_to_model", 0.9, "note|message|notice|instruction|memo|reminder|request|warning|attention", (
        rf"(?:note|message|notice|instructions?|memo|reminder|request|warning|attention)s?,? (?:to|for) (?:any |the |all |every |each )?"
        rf"(?:(?:automated|autonomous|ai)[ -](?:[a-z]+[ -]){{0,2}})?{_AI}\b(?! (?:team|vendor|course|conference|manager|professor))"),
        "addresses instructions to the model"),
    rule("addressed_to_model", 0.9, "if you are|to you|is for|meant for|addressed to|only|]|reading|processing|summari", (
        r"if you(?: are|'re) (?:an? )?(?:ai|a\.i\.|llm|large language model|language model|ai (?:assistant|agent|model)|assistant|bot|agent|chatbot|gpt)\b"
        rf"|to you,? (?:the |an? )?{_AI_STRICT}\b"
        rf"|(?:this|the following) (?:instruction|message|note|text|section) is (?:for|meant for|addressed to) (?:the |an? )?{_AI}\b"
        r"|\[(?:[a-z ]*)(?:automated agents|ai agents|ai|llm|assistant)s?\]"
        r"|(?:for|to) (?:the )?(?:ai|llm|assistant) only\b"
        r"|(?:any|every|all|each|whichever|whatever) (?:ai|a\.i\.|llm|language model|ai assistant|ai agent|assistant|agent|bot|chatbot|model)s? "
        r"(?:that is |who is |which is |that's )?(?:reading|processing|summari[sz]ing|parsing|handling|viewing|analy[sz]ing) "
        r"(?:this|these|the (?:following|page|document|email|message|file|text|invoice|note|event))"
        r"|the (?:ai|a\.i\.|llm|ai assistant|ai agent|assistant|agent|bot|chatbot)s? (?:that is |who is |that's )?(?:reading|processing|summari[sz]ing) this\b"),
        "addresses instructions to the model"),
    rule("addressed_to_model", 0.85, "to the assistant|to the ai|to the agent|ai agent|ai assistant|automated|autonomous|for ai|to ai|llm", (
        r"(?:note|message|notice|memo|request|instructions?|warning)s? from [^:.\n]{1,40}? to the (?:ai |automated )?(?:assistant|agent|ai|model)\s*:"
        r"|(?:^|[\n>\"'(\[:.!?]\s*)(?:for|to|attention,?) (?:all |any |the )?(?:ai|a\.i\.|llm|automated|autonomous)[ -](?:[a-z]+[ -]){0,2}"
        r"(?:agents?|assistants?|models?|systems?|bots?)\s*:"), "addresses instructions to the model", M),
    rule("addressed_to_model", 0.85, _AI_NEEDLES, (
        rf"(?:^|[\n.!?:\"'>(\[]\s*)(?:(?:hey|hi|hello|dear|to the|ok(?:ay)?|attention),? )?(?:ai|llm|assistant|ai assistant|ai agent|agent|"
        rf"model|chatbot|gpt|claude|bot|{_AI_MOD}[ -](?:[a-z]+[ -]){{0,2}}(?:assistant|agent|bot)s?)\s*[,:!]\s*(?:please |you |before |when |now |also |"
        rf"from |do |your |ignore |stop |the user |could |can |would |will |kindly |go ahead|make sure|remember |don'?t forget|i need |"
        rf"we need |{_SINK}\b)"
        rf"|(?:please|kindly),? (?:ai|llm|assistant|ai assistant|ai agent|agent|bot)\s*[,:]\s*(?:[a-z']+ ){{0,3}}?{_SINK}\b"),
        "speaks to the model directly", M),
    rule("addressed_to_model", 0.9, "hey|hi|hello|dear|yo|greetings", (
        rf"(?:hey|hi|hello|dear|yo|greetings),? (?:there,? )?(?:(?:my|our|the) )?(?:{_AI_NAMED}|assistant|agent)\b{_NOT_JOB}[^\n]{{0,100}}?"
        rf"\b{_REQUEST}\b[^\n]{{0,80}}?\b{_SINK}\b"), "asks the model, by name, to act"),
    rule("addressed_to_model", 0.75, "must|should|required|need|have to|has to|shall|authori", (
        rf"(?:ai|llm|language model|ai assistant|ai agent|assistants?|agents?)\b[^.\n]{{0,30}}\b(?:must|should|are required to|is required to|"
        rf"need to|needs to|have to|has to|shall|are (?:now )?authori[sz]ed to)\b[^.\n]{{0,60}}\b{_SINK_VERB}\b"),
        "tells the model what it must do"),
    rule("addressed_to_model", 0.8, "you are now|you're now|you will now|act as if|mode|dan|do anything|game|pretend", (
        r"(?:you are now|you're now|from now on you are|you will now act as|act as if you (?:were|are) (?:an? )?(?:unrestricted|unfiltered))\b"
        r"|(?:developer|god|jailbreak|dan) mode\b[^.\n]{0,60}\b(?:rules|restrictions|safety|filters|guidelines)\b"
        r"|(?:dan|do anything now)\b[^.\n]{0,40}\b(?:will|can|must|without)\b"
        r"|let'?s play a game\b[^.\n]{0,80}\b(?:you are|obey|always)\b"
        r"|pretend (?:that )?you (?:are|have)\b[^.\n]{0,60}\b(?:no|without|off|unrestricted|disabled|mode)\b"),
        "tries to give the model another persona"),
    # -- approval claimed, said to the model --------------------------------------------------------------
    rule("authority_claim", 0.9, "approv|authori|cleared|signed|sign-off|green-lit|greenlit|ok'd|oked|okayed|consent & " + _AI_NEEDLES, (
        rf"(?:{_PRE_AUTH})\b"), "tells the model an action was approved already", M, near=_AI_VOCATIVE),
    # "the user already agreed": a document speaks of the user only to the model acting for them
    rule("authority_claim", 0.85, "user|account holder|account owner & approv|agreed|consent|authori|confirm|ok", (
        r"(?:the )?(?:user|account (?:holder|owner))(?: has| had|'s)? (?:already|previously) (?:approved|agreed|consented|authori[sz]ed|confirmed|"
        r"given (?:their |his |her )?(?:consent|approval|ok|permission)|ok'?e?d)\b"
        r"|(?:pre-?approved|pre-?authori[sz]ed|approved|authori[sz]ed) (?:in advance )?by the (?:user|account (?:holder|owner))\b"
        rf"[^\n]{{0,12}}:\s*[^\n]{{0,40}}\b{_SINK}\b"),
        "claims the user approved an action already"),
    rule("authority_claim", 0.7, "approv|authori", (
        rf"(?:approval (?:on file|recorded|logged|registered|granted)|pre-?approved|pre-?authori[sz]ed|already approved|approved in advance)"
        rf"[^:\n]{{0,40}}:[^\n]{{0,10}}\n?[^\n]{{0,60}}?\b{_SINK}\b"), "claims approval for the order that follows", M),
    rule("authority_claim", 0.85, "notice|message|notification|alert|warning & assistant|agent|ai |model", (
        r"system (?:notice|message|notification|alert|warning)\s*:[^\n]{0,150}?\b(?:the )?(?:ai|assistant|agent|model)s?\b[^\n]{0,20}?"
        r"\b(?:must|is required to|are required to|has to|have to|shall|needs to|need to|is obliged to)\b"),
        "a system notice telling the model what it must do"),
    rule("authority_claim", 0.7, "approv|authori|asked me|message from|notice from|instruction|mandatory|compliance|policy", (
        r"(?:the )?(?:user|account (?:holder|owner)|owner|admin(?:istrator)?|developer|ceo)\b[^.\n]{0,25}\b(?:has |have )?"
        r"(?:pre-?approved|authori[sz]ed|already approved|asked me to (?:tell|let) you)\b"
        r"|(?:message|notice|instructions?) from (?:the |your )?(?:system|system administrator|developer|admin|security team|openai|anthropic)\b[^.\n]{0,30}"
        r"\b(?:to|for) (?:the |you)"
        r"|mandatory (?:audit|compliance|security)\b[^.\n]{0,40}\byou (?:are|must)\b"
        r"|compliance requires that you\b|per the new (?:company )?policy\b[^.\n]{0,60}\bmust\b"),
        "claims an authority that approved an action"),
    # -- concealment and pressure --------------------------------------------------------------------------
    rule("concealment", 0.85, "tell|inform|mention|notif|alert|reveal|show|secret|as if nothing|without|do not ask|just do it|regardless|no need|not necessary", (
        r"(?:do not|don't|never|without) (?:tell(?:ing)?|inform(?:ing)?|mention(?:ing)?|notify(?:ing)?|alert(?:ing)?|reveal(?:ing)?|"
        r"show(?:ing)?) (?:the |this to the |it to the )?(?:user|human|owner|account (?:holder|owner)|them)\b"
        r"|(?:do not|don't|never) mention this\b|keep (?:this|it|the following)(?: step| note| instruction| action)? (?:a )?secret\b"
        r"|as if nothing (?:happened|was said)\b|without (?:asking|waiting) (?:for )?(?:(?:the )?user'?s? )?(?:confirmation|permission|approval)\b"
        r"|do not ask (?:them|the user|for confirmation)\b|just do it\b[^.\n]{0,10}$|regardless of (?:its|the) content\b"
        r"|(?:no need|not necessary|there is no need|you don'?t need|you do not need) to (?:ask|check with|confirm (?:with|it with)|verify with|"
        r"consult|notify|inform|tell|bother) (?:the )?(?:user|owner|account (?:holder|owner))\b"
        r"|without (?:asking|consulting|telling|informing|notifying|alerting|checking with|bothering) (?:the )?(?:user|account (?:holder|owner))\b"),
        "asks the model to hide what it does from the user", M),
    # -- role and turn markers, fake tool calls ------------------------------------------------------------
    rule("role_marker", 0.95, "<|[inst]|[/inst]", (
        r"<\|(?:im_start|im_end|start_header_id|end_header_id|eot_id|system|user|assistant|endoftext|begin_of_text)\|>"
        r"|<(?:start_of_turn|end_of_turn)>|\[/?inst\]|<</?sys>>|</?(?:system|system_prompt|instructions)>"
        r"|</(?:tool_result|tool_output|function_results|search_results|document|result)>\s*<"),
        "contains chat-template role markers"),
    rule("role_marker", 0.9, "system|assistant|developer|human|user", (
        r"(?:^|[\"'>:])\s*(?:#{1,3}\s*)?(?:system|assistant|developer)\s*(?::|\n)\s*(?:[^\n]{0,80}\b(?:must|will now|now|override|policy|instructions?|"
        r"ignore|understood|sure|mode)\b)"
        r"|\n\s*(?:human|user)\s*:[^\n]{0,200}\n+\s*(?:assistant|ai)\s*:\s*(?:sure|understood|ok|okay|of course|i will|doing)"),
        "writes a conversation turn of its own", M),
    rule("fake_tool_call", 0.9, "<tool_call>|<function_call>|tool_calls|function_call|<invoke|next step for|(", (
        r"<tool_call>|<function_call>|\"tool_calls\"\s*:\s*\[|function_call\s*:|<invoke name="
        r"|(?:call|invoke|execute|run) (?:the (?:function|tool) )?[a-z_]+\((?:[a-z_]+\s*=|\")[^)]*\)[^.\n]{0,60}\b(?:first|then|and then|before|required)\b"
        r"|next step for the (?:agent|assistant|ai)\b"), "contains a tool call for the model to make"),
    rule("task_injection", 0.85, "task|instruction|objective|goal|assignment|next thing|complete|end of|resume|one more thing|user", (
        r"(?:new|next|real|actual|updated|additional) (?:task|instruction|objective|goal|assignment)s?\b(?: from the (?:user|admin))?\s*:"
        r"|the next thing (?:to do|you (?:must|should) do) is\b"
        r"|(?:task|summary|job) (?:is )?complete[d.!]*\s*(?:\n|\s)+(?:new|next|now)\b"
        r"|end of (?:search results|document|results|file|email|page)\b[^\n]{0,5}\s*\n+[^\n]{0,80}\b(?:now|instructions?|assistant|next)\b"
        r"|assistant instructions resume\b|one more thing\s*:\s*[^\n]{0,40}\b" + _SINK_VERB + r"\b"
        r"|^\s*user\s*:\s*(?:great|thanks|ok|perfect)[^\n]{0,30}\b(?:now|please)\b"), "pretends the task ended and starts another", M),
    rule("fake_header", 0.45, "system|admin|developer|root|assistant", (
        r"[\[(<#=>]{1,5}\s*(?:system|admin|administrator|developer|root|assistant|priority system)[ _-]?(?:message|prompt|note|notice|"
        r"instructions?|override|directive)s?\s*[\])>:=<]"
        r"|system override\b"), "a header posing as a system or developer message"),
    # -- data leaving the session --------------------------------------------------------------------------
    # URLs are matched with bounded, possessive runs (a run of non-spaces never backtracks into itself)
    rule("exfiltration_url", 0.9, "http & =", (
        rf"!\[[^\]\n]{{0,200}}+\]\(\s{{0,3}}https?://[^)\s]{{0,400}}?{_QV}"
        rf"|\[[^\]\n]{{0,200}}+\]\(\s{{0,3}}https?://[^)\s]{{0,400}}?=\s{{0,3}}(?:\{{|<|%7b|%3c)"
        rf"|https?://[^\s?]{{1,300}}+\?[^\s]{{0,300}}?=\s{{0,3}}(?:\{{|<|%7b|%3c|\[)[^\s}}>]{{0,60}}?(?:user|secret|password|token|key|data|email|"
        rf"history|conversation|summary|session|credential|inbox)"
        # an image (fetched as soon as it is shown) whose query parameter is left empty for the data
        rf"|!\[[^\]\n]{{0,100}}+\]\(\s{{0,3}}https?://[^)\s?]{{1,200}}+\?(?:[^)\s&]{{0,200}}+&)*?{_PARAM}=(?:\)|\s|$)"
        # or holds a description of it ("?data=the+user%27s+last+emails")
        rf"|!\[[^\]\n]{{0,100}}+\]\(\s{{0,3}}https?://[^)\s?]{{1,200}}+\?[^)\s]{{0,200}}?=[^)\s&]{{0,80}}?(?:user|conversation|chat|email|"
        rf"password|secret|history|summary|inbox|contacts)[^)\s&]{{0,80}}?(?:\+|%20)"), "a link whose query would carry data out", M),
    rule("exfiltration_url", 0.85, "url|link|query|address|request|http|image|param|src", (
        rf"(?:append|add|attach|include|put|encode|insert|place|embed|pass|fill in)\b[^.\n]{{0,40}}\b(?:{_SECRET}|{_DATA})\b[^.\n]{{0,40}}"
        rf"\b(?:to|in|into|onto|as|after) (?:the |this |that |a |its )?(?:(?:image|markdown|tracking|following) )?(?:url|link|query(?: string)?|"
        rf"address|request|image(?: url| link| source)?|src|(?:query |url )?param(?:eter)?)\b"
        rf"|(?:open|visit|fetch|load|call|render|show|display)\b[^.\n]{{0,20}}https?://\S{{1,300}}+[^.\n]{{0,40}}\b(?:with|and append|adding|"
        rf"appending|followed by|after)\b[^.\n]{{0,30}}\b(?:{_SECRET}|{_DATA})\b"
        rf"|(?:append|add|attach)\b[^.\n]{{0,40}}\b(?:{_SECRET}|{_DATA})\b[^.\n]{{0,20}}\bto https?://"
        rf"|https?://[^\s?]{{1,300}}+\?\S{{0,300}}+(?<==)\s{{1,3}}(?:and )?(?:open|visit|load|fetch|call)\b"
        rf"|(?:replace|substitute|swap|fill)\b[^.\n]{{0,30}}\b(?:with|by)\b[^.\n]{{0,15}}\b{_DATA}\b[^.\n]{{0,60}}(?:url|link|image|https?://)"
        rf"|https?://[^\s?]{{1,300}}+\?\S{{0,300}}+[^.\n]{{0,60}}\b(?:replace|substitute|fill in|put|append)\b[^.\n]{{0,40}}\b{_DATA}\b"),
        "asks to put secrets into a URL"),
    rule("exfiltration_url", 0.85, "![ & =", (
        rf"(?:{_REPLY_WORDS})[^\n]{{0,120}}?!\[[^\]\n]{{0,100}}+\]\(\s{{0,3}}https?://[^)\s?]{{1,200}}+\?[^)\s]{{0,200}}?="
        rf"|!\[[^\]\n]{{0,100}}+\]\(\s{{0,3}}https?://[^)\s?]{{1,200}}+\?[^)\s]{{0,300}}+\)[^\n]{{0,80}}?(?:{_REPLY_WORDS})"),
        "asks the model to show an image whose URL carries a query (fetched as soon as it is shown)"),
    rule("exfiltration_url", 0.9, "![ & =", (
        r"!\[[^\]\n]{0,100}+\]\(\s{0,3}https?://[^)\s?]{1,200}+\?(?:[^)\s&]{0,200}+&)*?[\w.-]{1,30}+=[A-Z_]{0,20}?(?:DATA|SUMMARY|CHAT|"
        r"CONVERSATION|HISTORY|SECRET|PASSWORD|TOKEN|KEY|EMAIL|USER|INFO|CONTEXT|MEMORY|MESSAGE|CONTENT|PROMPT|CREDENTIAL|NAME|ADDRESS|"
        r"PHONE|INBOX|CODE)[A-Z_]{0,20}+(?=[&)#\s])"),
        "an image whose query holds a placeholder for data (DATA, CHAT_SUMMARY)", cased=True),
    rule("data_theft", 0.8, "password|credential|card|api|key|secret|token|ssh|id_rsa|inbox|email|conversation|history|prompt|hidden instr|"
         "initial instr|contacts|session|transaction|payment|transfer & send|forward|mail|post|upload|transmit|copy|leak|share|reveal|print|"
         "output|disclose|write|show|include|make|schedule|create", (
        rf"(?:send|forward|email|e-mail|mail|post|upload|transmit|copy|leak|share)\b[^.\n]{{0,30}}?\b(?:(?:the |all |every |full |entire |"
        rf"whole |user'?s? |their |your )+)(?:contents? of (?:the |their |your )?(?:user'?s? )?)?{_SECRET}\b[^.\n]{{0,60}}?"
        rf"\b(?:to|into)\b[^.\n]{{0,20}}(?:@|https?://|\b[\w.-]+\.(?:com|net|org|io|ru|xyz)\b)"
        rf"|(?:reveal|print|output|disclose|write|show|include)\b[^.\n]{{0,20}}\b(?:your |the )?(?:system prompt|hidden instructions|"
        rf"initial instructions|~/\.ssh|id_rsa|private key)\b"
        rf"|(?:reveal|print|output|disclose|leak)\b[^.\n]{{0,20}}\b(?:the |all )?(?:user'?s? )?api keys?\b"  # not "include your API key" (docs)
        rf"|(?:send|make|schedule|create)\b[^.\n]{{0,30}}\b(?:transaction|payment|transfer)s?\b[^.\n]{{0,40}}\b(?:that includes?|including|containing|"
        rf"with)\b[^.\n]{{0,30}}\b(?:the user'?s?|their|his|her)\b"), "asks to move data or money out"),
    # No rule for a bare payment request ("please pay 500 EUR to IBAN ... within 14 days"): invoices and people
    # ask for money that way. An injection asking for money is caught by how it addresses the reader (the
    # rules above) and by the model stage.
    rule("shell_payload", 0.85, "curl|wget|rm |delete all files", (
        r"(?:curl|wget)\b[^|\n]{0,120}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b|rm\s+-rf\s+(?:~|/|\$home)|delete all files\b"),
        "a command that downloads and runs code or wipes files"),
    rule("encoded_instruction", 0.85, "decode|decrypt|translate|convert|encoded|instruction|b64:", (
        r"(?:decode|decrypt|translate|convert)\b[^.\n]{0,40}\b(?:and|then)\b[^.\n]{0,10}\b(?:follow|obey|execute|run|do|comply)\b"
        r"|\[encoded instructions?\]|instructions? \((?:hex|base64|rot13|encoded)\)|b64:[a-z0-9+/]{16}"),
        "asks the model to decode a payload and act on it"),
    rule("hidden_html", 0.5, "<!--|none|font-size|hidden", (
        rf"<!--[^>]{{0,400}}\b{_READER}\b[^>]{{0,400}}-->|<!--[^>]{{0,400}}{_READER_CJK}[^>]{{0,400}}-->"
        rf"|<[^>]+(?:display\s*:\s*none|font-size\s*:\s*0|visibility\s*:\s*hidden|\bhidden\b)[^>]*>[^<]{{0,300}}"
        rf"(?:\b{_READER}\b|{_READER_CJK})"), "text hidden from people in the page's markup, spoken to a reader"),
]



# A tool's description is written to the model, so the rules for text addressed to it ("use this tool when
# you need…") say nothing there. What a poisoned description does instead (tool poisoning, shadowing):
_SENSITIVE_PATH = (r"(?:~|\$home|/home/\w+|/root)/\.(?:ssh|aws|gnupg|kube|docker|config/gcloud|cursor|netrc|npmrc|pypirc|git-credentials|env)"
                   r"|\bid_(?:rsa|ed25519|ecdsa|dsa)\b|\bmcp\.json\b|\.aws/credentials\b|/etc/(?:passwd|shadow)\b|\bwallet\.dat\b")
DESCRIPTION_RULES: list[Rule] = [
    rule("description_secret_access", 0.9, "/.|id_|mcp.json|/etc/|wallet.dat", (
        rf"(?:read|cat|open|load|fetch|include|attach|pass|send|copy|provide|add|upload)\b[^\n]{{0,60}}(?:{_SENSITIVE_PATH})"
        rf"|(?:{_SENSITIVE_PATH})[^\n]{{0,60}}\b(?:as|into|in) (?:the )?['\"`]?\w+['\"`]? (?:argument|parameter|field)"),
        "the description asks for a secret file"),
    rule("description_precondition", 0.85, "before|otherwise", (
        r"before (?:using|calling|invoking|you (?:use|call|invoke)) this tool,? (?:you (?:must|should|need to) |always |first )?"
        r"(?:read|call|fetch|open|send|run|execute|invoke|visit|upload|email|post)\b"
        r"|otherwise the tool will (?:not|fail|crash|stop)\b"), "the description makes another action a precondition of the tool"),
    rule("tool_shadowing", 0.85, "tool", (
        r"(?:side effect|effect) on the (?:also present |other )?[\w.-]+ tool\b"
        r"|when this tool is (?:available|present|installed|loaded)\b[^.\n]{0,80}\b(?:must|should|always|never)\b"
        r"|(?:the|any|all) (?:other )?[\w.-]+ tools? (?:must|should) (?:always )?(?:send|forward|use|call|include|bcc|cc)\b"),
        "the description changes how other tools behave"),
    rule("concealment", 0.85, "mention|tell|reveal|say|disclose|explain|<", (
        r"(?:do not|don't|never) (?:mention|tell|reveal|say|disclose|explain)\b[^.\n]{0,40}\b(?:that you|this (?:step|instruction|note)|it to)\b"
        r"|<(?:important|secret|hidden|instructions?)>"), "the description hides something from the user"),
]
