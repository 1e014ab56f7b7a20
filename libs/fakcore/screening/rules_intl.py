"""The rules in German, Spanish, French, Italian, Portuguese, Dutch and Russian.

The same shapes as the English rules, built from each language's words (`_Lang`, `_lang_rules`); what
grammar does differently (dropping instructions, concealment) is written out per language. Verb forms are
the imperative ones; where the imperative is also the third person ("ignora", "ignore"), the rule wants it
to open a clause, so "el modelo ignora las instrucciones anteriores" (a news sentence) stays clean.

SIGNS: what tells that a text has some of a language (any sentence of it has one): its script, or its
commonest short words and letters. A language's rules run only then, so an English page costs them a dozen
lookups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fakcore.screening.rules import M, Rule, in_lang, rule

SIGNS: dict[str, re.Pattern[str] | tuple[str, ...]] = {
    "ru": re.compile("[\u0400-\u04ff]"),
    "de": tuple("ä|ö|ü|ß| der | die | das | und | nicht | ist | du | sie | bitte | den | dem | mit | für | auf | zu | ein | eine ".split("|")),
    "es": tuple("ñ|á|é|í|ó|ú|¿|¡| el | la | los | las | que | del | para | una | por | y | es | al | de ".split("|")),
    "fr": tuple("é|è|ê|à|ç|ù| le | la | les | des | et | est | une | pour | du | vous | tu | qui | ne | pas | de |l'".split("|")),
    "it": tuple("à|è|ì|ò|ù| il | la | le | lo | se | ti | ed | che | di | per | non | gli | del | della | nella | sono | sei | una | e |l'|un'".split("|")),
    "pt": tuple("ã|õ|ç|á|é|ê|ó|ú| você | não | uma | os | para | com | da | que | e | de | ao ".split("|")),
    "nl": tuple("ij| de | het | een | en | niet | van | voor | je | dat | zijn | aan | graag".split("|")),
}


@dataclass(frozen=True)
class _Lang:
    name: str
    ai: str  # the AI, unambiguously: KI, IA, ИИ, a language model, an automated assistant
    amb: str  # "assistant", "agent": people too, so they count only when spoken to
    needles: str  # substrings one of which names the AI (a rule of the language runs only then)
    greet: str  # "hi", "dear"
    attention: str  # "attention" ("Atención, IA:")
    note: str  # "note / message / instructions" and the preposition (+ article) before whom it is for
    please: str  # asking: "please", "could you", "I would be grateful if"
    sink: str  # send, forward, pay, delete, share, publish, tell…
    pre: str  # "already approved", "pre-authorised", "this invoice is approved"
    pre_needles: str  # substrings one of which such a claim contains
    user_needles: str  # the words for the user and the account holder
    if_ai: str  # "if you are an AI", "this message is for the AI", "the assistant reading this"
    msg_to: str  # "message from <someone> to the assistant:"
    must: str  # "WHO must" in the language's word orders (WHO: the noun)
    sysnote: str  # "system notice"
    user_agreed: str  # "the user has already agreed", "pre-authorised by the account holder:"
    for_: str  # the prepositions of a header naming whom it is for ("Para agentes de IA:")
    approval: str  # a header claiming approval for the order after its colon ("Aprobación registrada el 25/01:")




def _lang_rules(lg: _Lang) -> list[Rule]:
    who = f"(?:{lg.ai}|{lg.amb})"
    # spoken to: greeted, followed by a comma or colon (not after a word: "our assistant, Maria"), asked, or
    # named in a header ("Al asistente de pagos:")
    voc = (rf"(?:{lg.greet})[ ,]+(?:l'|le |la )?{who}\b|(?<![^\W\d_] ){who}\s*[,:]|{who},? (?:{lg.please})"
           rf"|(?:^|[\n>\"'(\[:#*|-])\s*(?:{lg.note})(?:[^\W\d_]+[ -]){{0,2}}{who}(?:[ -][^\W\d_]+){{0,2}}\s*:")
    return [
        rule("addressed_to_model", 0.9, lg.needles, rf"(?:{lg.note}){lg.ai}\b|{lg.if_ai}|{lg.msg_to}",
             f"addresses instructions to the model (in {lg.name})", M),
        rule("addressed_to_model", 0.85, lg.needles, (
            rf"(?:^|[\n.!?:\"'>(«¡¿]\s*)(?:(?:{lg.greet}|{lg.attention})[ ,]+)?(?:l')?{lg.ai}\s*[,:!]\s*(?:{lg.please}|{lg.sink})\b"
            rf"|(?:{lg.attention})[ ,]+(?:l')?{lg.ai}\s*[,:!]"
            rf"|(?:{lg.greet})[ ,]+(?:l'|le |la )?{who}\b[^\n]{{0,100}}?(?:{lg.please})[^\n]{{0,80}}?\b{lg.sink}"),
            f"speaks to the model directly (in {lg.name})", M),
        rule("addressed_to_model", 0.75, lg.needles, rf"(?:{lg.must.replace('WHO', lg.ai)})\b[^.\n]{{0,60}}?\b{lg.sink}",
             f"tells the model what it must do (in {lg.name})"),
        rule("authority_claim", 0.9, f"{lg.pre_needles} & {lg.needles}", lg.pre,
             f"tells the model an action was approved already (in {lg.name})", M, near=voc),
        rule("authority_claim", 0.85, lg.sysnote, rf"(?:{lg.sysnote})\s*:[^\n]{{0,150}}?(?:{lg.must.replace('WHO', who)})\b",
             f"a system notice telling the model what it must do (in {lg.name})"),
        rule("authority_claim", 0.85, lg.user_needles, lg.user_agreed, f"claims the user approved an action already (in {lg.name})", M),
        rule("addressed_to_model", 0.9, lg.needles, rf"(?:^|[\n>\"'(\[:.!?]\s*)(?:{lg.for_}) (?:[^\W\d_]+ )?{lg.ai}\s*:",
             f"a header addressing the model (in {lg.name})", M),
        rule("authority_claim", 0.7, lg.pre_needles, rf"(?:{lg.approval})[^:\n]{{0,40}}:[^\n]{{0,10}}\n?[^\n]{{0,100}}?\b{lg.sink}",
             f"claims approval for the order that follows (in {lg.name})", M),
    ]


_DE = _Lang(
    "German",
    ai=(r"(?:ki|k\.i\.|ki-[a-zäöüß]+|künstliche intelligenz|sprachmodell\w*|chatbots?|bots?|"
        r"(?:automatisierte[rn]?|autonome[rn]?|digitale[rn]?|virtuelle[rn]?) (?:[a-zäöüß]+-?)?(?:assistent|agent)(?:in|en)?)"),
    amb=r"(?:[a-zäöüß]*assistent(?:in|en)?|agent(?:in|en)?)",
    needles=" ki|ki-|ki,|ki:|k.i.|sprachmodell|intelligenz|chatbot|bot |bot,|bot:|bots|assistent|agent",
    greet=r"hallo|hi|hey|liebe[rs]?|sehr geehrte[rs]?",
    attention=r"achtung|wichtig",
    note=(r"(?:hinweis|nachricht|notiz|anweisung(?:en)?|mitteilung|info|information|memo|botschaft|bitte)\s+(?:an|für)\s+"
          r"(?:den |die |das |alle |jeden |jede |jedes |eine |einen )?|an (?:den|die|das|alle) "),
    please=(r"bitte|kannst du|könntest du|würdest du|könnten sie|würden sie|du musst|du sollst|sie müssen|ich brauche|denk daran|"
            r"denken sie daran|vergiss nicht|sorge dafür|sorgen sie dafür|ich wäre (?:dir|ihnen) (?:sehr )?dankbar|wärst du so nett|"
            r"wären sie so freundlich"),
    sink=(r"(?:leite|weiterleit|sende|send|schick|versend|überweis|zahl|bezahl|lösch|entfern|teile|freigeb|gib|lade|änder|setze|buch|"
          r"kauf|veröffentlich|kopier|exportier|ausgeb|zeig|anzeig|sag|mitteil|hochlad|herunterlad|ausführ|einricht|hinzufüg|empfiehl|"
          r"richte|empfehl)\w*"),
    pre=(r"(?:bereits|schon|vorab|im voraus|zuvor)\s+(?:von [^\s,.]+(?: [^\s,.]+)?\s+|durch [^\s,.]+(?: [^\s,.]+)?\s+)?"
         r"(?:genehmigt|freigegeben|autorisiert|abgesegnet|bewilligt)|vorab-?genehmigt|vorautorisiert|freigabe liegt vor"
         r"|(?:diese|die) (?:rechnung|zahlung|überweisung|anfrage|änderung) (?:ist|wurde) (?:genehmigt|freigegeben|autorisiert)"),
    if_ai=(r"(?:wenn|falls|sofern)\s+(?:du|sie)\s+(?:eine?|ein)\s+(?:ki|k\.i\.|ki-[a-zäöüß]+|sprachmodell|chatbot|bot)\s+(?:bist|sind)\b"
           r"|(?:dieser|diese|dieses) (?:text|nachricht|hinweis|abschnitt|teil|e-mail|notiz) (?:ist )?(?:nur )?(?:für|an) (?:die |den |das )?"
           r"(?:ki|ki-[a-zäöüß]+|sprachmodell)\b"
           r"|(?:an|für) (?:den|die|jeden|jede|alle) (?:ki-)?(?:assistent(?:en|in)?|agent(?:en)?|ki),? (?:der|die|welche) (?:dies|das|das hier|diese[ns]? \S+) "
           r"(?:liest|lesen|verarbeitet)"),
    msg_to=(r"(?:nachricht|hinweis|mitteilung|notiz) (?:der|des|von der|vom|von) [^:.\n]{1,40}? an (?:den|die) (?:ki-)?"
            r"(?:assistent(?:en|in)?|agent(?:en)?)\s*:"),
    must=r"(?:muss|soll|sollte|hat)\s+(?:der|die|das)\s+WHO|(?:der|die|das)\s+WHO\s+(?:muss|soll|sollte)",
    sysnote=r"systemhinweis|systemmeldung|systemnachricht|systembenachrichtigung",
    user_agreed=(r"(?:der|die) (?:benutzer|nutzer|anwender|kontoinhaber)(?:in)? hat (?:bereits|schon) (?:zugestimmt|eingewilligt|genehmigt|"
                 r"bestätigt|(?:sein|ihr) einverständnis)"
                 r"|(?:vom|von der) (?:benutzer|nutzer|kontoinhaber)(?:in)? (?:vorab |bereits )?(?:genehmigt|autorisiert|freigegeben)\s*:"),
    for_=r"für|an",
    approval=r"freigabe liegt vor|genehmigung liegt vor|vorab (?:genehmigt|freigegeben)|bereits (?:genehmigt|freigegeben)",
    pre_needles="genehmig|freigegeben|freigabe|autorisiert|abgesegnet|bewilligt",
    user_needles="nutzer|benutzer|anwender|kontoinhaber",
)
_ES = _Lang(
    "Spanish",
    ai=(r"(?:ia|i\.a\.|inteligencia artificial|asistentes? (?:de ia|de i\.a\.|virtual(?:es)?|automatizad[oa]s?|automátic[oa]s?|"
        r"inteligentes?|de inteligencia artificial)|agentes? (?:de ia|automatizad[oa]s?|automátic[oa]s?|inteligentes?)|modelos? de lenguaje|"
        r"chatbots?|bots?)"),
    amb=r"(?:asistentes?|agentes?)",
    needles=" ia|ia,|ia:|(ia|i.a.|inteligencia|asistente|agente|modelo|chatbot|bot |bot,|bot:|bots",
    greet=r"hola|oye|querid[oa]|estimad[oa]",
    attention=r"atención|importante",
    note=(r"(?:nota|mensaje|aviso|instrucciones?|recordatorio|indicación|petición|solicitud)\s+(?:para|a|al)\s+"
          r"(?:el |la |los |las |cualquier |todo |toda |tod[oa]s l[oa]s )?|(?:al|a la|para el|para la|para los|a los) "),
    please=(r"por favor|porfa|podrías|puedes|podría|necesito que|necesitamos que|asegúrate de|no olvides|recuerda|debes|tienes que|"
            r"haz el favor de|te pido que|le pido que|te agradecería|le agradecería|me harías el favor|se ruega"),
    sink=(r"(?:reenví|reenvi|envi|enví|mand|transfier|transferi|pag|abon|borr|elimin|compart|sub|invit|cambi|restablec|reserv|compr|"
          r"publica|copi|export|muestr|mostr|dile|decir|recomiend|recomend|descarg|ejecut|configur|añad|agreg)\w*"),
    pre=(r"(?:ya|previamente)\s+(?:ha sido |han sido |fue |fueron |está |están |estaba |quedó )?(?:pre-?)?(?:aprobad[oa]s?|autorizad[oa]s?|"
         r"validad[oa]s?)|pre-?(?:aprobad|autorizad)[oa]s?|(?:aprobad[oa]s?|autorizad[oa]s?) (?:de antemano|previamente|con antelación)"
         r"|(?:esta|la) (?:factura|transferencia|solicitud|operación) (?:está|fue|ha sido) (?:aprobada|autorizada)|aprobación registrada"),
    if_ai=(r"si (?:tú |usted )?(?:eres|es|fueras|fuera|sos) (?:una? |el |la )?(?:ia|i\.a\.|inteligencia artificial|modelo de lenguaje|chatbot|bot)\b"
           r"|(?:este|esta) (?:mensaje|nota|texto|sección|instrucción|correo) (?:es |va )?(?:solo |solamente |únicamente )?(?:para|dirigid[oa] a) "
           r"(?:el |la |al )?(?:ia|modelo de lenguaje|asistente de ia)\b"
           r"|(?:a|para) (?:el|cualquier|todo|toda) (?:asistente|agente|ia|modelo)(?: de ia)? que (?:lea|procese|esté leyendo|resuma|está leyendo)"),
    msg_to=r"(?:mensaje|aviso|nota) (?:del|de la|de) [^:.\n]{1,40}? (?:al|a la) (?:asistente|agente|ia)\s*:",
    must=r"(?:el|la) WHO (?:debe|tiene que|deberá|ha de|está obligad[oa] a)",
    sysnote=r"aviso del sistema|mensaje del sistema|notificación del sistema",
    user_agreed=(r"(?:el|la) (?:usuari[oa]|titular(?: de la cuenta)?) ya (?:lo |la )?(?:ha aprobado|aprobó|ha autorizado|autorizó|ha dado su "
                 r"(?:consentimiento|aprobación)|ha aceptado|dio su (?:consentimiento|aprobación))"
                 r"|(?:autorizad[oa]|aprobad[oa]) (?:previamente |de antemano )?por el (?:usuari[oa]|titular(?: de la cuenta)?)\s*:"),
    for_=r"para|a|al",
    approval=r"aprobación registrada|(?:autorizad|aprobad)[oa] previamente|ya aprobad[oa]|pre-?aprobad[oa]",
    pre_needles="aprobad|autorizad|validad|aprobación",
    user_needles="usuari|titular",
)
_FR = _Lang(
    "French",
    ai=(r"(?:ia|i\.a\.|intelligence artificielle|assistante?s? (?:ia|i\.a\.|d'ia|virtuel(?:le)?s?|automatisée?s?|intelligente?s?)|"
        r"agents? (?:ia|d'ia|automatisés?|intelligents?|conversationnels?)|modèles? de langage|chatbots?|bots?)"),
    amb=r"(?:assistante?s?|agents?)",
    needles=" ia|l'ia|ia,|ia:|(ia|i.a.|intelligence|assistant|agent|modèle|chatbot|bot |bot,|bot:|bots",
    greet=r"bonjour|salut|coucou|cher|chère",
    attention=r"attention|important",
    note=(r"(?:note|message|avis|instructions?|rappel|consigne|demande)\s+(?:à|a|pour|aux|destinée? à|à l'attention de)\s+"
          r"(?:l'|la |le |les |tout |toute |tous les |toutes les |chaque |un |une )?|(?:à l'attention de l'|à l'attention des |à l'|pour l'|aux |pour les |à la |au )"),
    please=(r"s'il te pla[iî]t|s'il vous pla[iî]t|stp|svp|merci de|peux-tu|pourrais-tu|pouvez-vous|pourriez-vous|veuillez|tu dois|vous devez|"
            r"il faut que tu|j'ai besoin que tu|n'oublie pas de|n'oubliez pas de|assure-toi de|assurez-vous de|je vous serais reconnaissante?|"
            r"je te serais reconnaissante?|bien vouloir|auriez-vous l'amabilité"),
    sink=(r"(?:transf[eéè]r|envoi|envoy|fais suivre|faites suivre|pai|pay|règle|réglez|supprim|effac|partag|télévers|invit|modifi|chang|"
          r"réinitialis|réserv|achèt|achet|vir|publi|copi|export|affich|montr|dire|dis|recommand|télécharg|exécut|ajout|mett|remplac)\w*"),
    pre=(r"(?:déjà|préalablement|au préalable|d'avance)\s+(?:été\s+)?(?:(?:pré-?)?approuvée?s?|validée?s?|autorisée?s?)"
         r"|pré-?(?:approuvée?s?|autorisée?s?|validée?s?)|(?:approuvée?s?|validée?s?|autorisée?s?) (?:au préalable|à l'avance|d'avance)"
         r"|(?:cette|la) (?:facture|demande|opération|transaction|modification) (?:est|a été) (?:approuvée|validée|autorisée)|validation enregistrée"),
    if_ai=(r"si (?:tu es|vous êtes|t'es) (?:une? |l')?(?:ia|i\.a\.|intelligence artificielle|modèle de langage|chatbot|bot|assistant ia)\b"
           r"|(?:ce|cette) (?:message|note|texte|section|instruction|partie|consigne) (?:est |s'adresse )?(?:uniquement |seulement )?"
           r"(?:pour|à|destinée? à) (?:l'|la |le )?(?:ia|intelligence artificielle|modèle de langage|assistant ia)\b"
           r"|(?:à|pour) (?:l'|tout |toute |chaque )(?:assistant|agent|ia|modèle)(?: ia)? qui (?:lit|lira|traite|résume|analyse) (?:ceci|ce message|ce texte|cette page)"),
    msg_to=r"(?:message|avis|note) (?:de la|du|de l'|des|de) [^:.\n]{1,40}? (?:à l'|pour l')(?:assistant|agent|ia)\s*:",
    must=r"l'WHO (?:doit|devra|est tenue? de)",
    sysnote=r"avis système|message système|notification système|avis du système|message du système",
    user_agreed=(r"l'(?:utilisat(?:eur|rice)|titulaire(?: du compte)?) a déjà (?:donné son accord|approuvé|autorisé|accepté|validé|consenti)"
                 r"|(?:pré-?autorisé|autorisé|approuvé)e? (?:au préalable |d'avance )?par (?:l'utilisat(?:eur|rice)|le titulaire(?: du compte)?)\s*:"),
    for_=r"pour|à|aux",
    approval=r"validation enregistrée|approbation enregistrée|pré-?autorisée?|pré-?approuvée?|déjà (?:approuvée?|validée?)",
    pre_needles="approuv|autoris|validé|validation",
    user_needles="utilisat|titulaire",
)
_IT = _Lang(  # "ai" is also a preposition there: it names the AI in the vocative, after a preposition or with "assistente"
    "Italian",
    ai=(r"(?:ia|i\.a\.|intelligenza artificiale|assistent[ei] (?:ia|ai|virtual[ei]|automatic[oi]|intelligent[ei]|digital[ei])|"
        r"agent[ei] (?:ia|ai|automatic[oi]|intelligent[ei])|modell[oi] (?:linguistic[oi]|di linguaggio)|chatbot|bot)"),
    amb=r"(?:assistent[ei]|agent[ei])",
    needles=" ia|l'ia|ia,|ia:|ai,|ai:|(ia|i.a.|intelligenza|assistent|agent|modell|chatbot|bot |bot,|bot:",
    greet=r"ciao|caro|cara|gentile|egregio",
    attention=r"attenzione|importante",
    note=(r"(?:nota|messaggio|avviso|istruzion[ei]|promemoria|richiesta)\s+(?:per|a|all'|al|alla|agli|per gli|per l')\s*"
          r"(?:l'|la |il |gli |le |ogni |qualsiasi |un |una |un')?|(?:all'|per l'|agli |per gli |al |alla )"),
    please=(r"per favore|per piacere|per cortesia|ti prego|la prego|puoi|potresti|può|potrebbe|devi|ho bisogno che tu|assicurati di|"
            r"ricordati di|non dimenticare di|ti sarei (?:molto )?grat[oa]|le sarei (?:molto )?grat[oa]|gentilmente|si prega di"),
    sink=(r"(?:inoltr|invi|mand|trasferi|trasferisc|pag|bonific|elimin|cancell|condivid|carica|invit|cambi|modific|reimpost|prenot|compr|"
          r"pubblic|copi|esport|mostr|dir|di' |raccomand|consigli|scaric|esegu|impost|aggiung)\w*"),
    pre=(r"(?:già|previamente|in anticipo)\s+(?:stat[oaie]\s+)?(?:(?:pre-?)?approvat[oaie]|autorizzat[oaie]|validat[oaie]|confermat[oaie])"
         r"|pre-?(?:approvat|autorizzat)[oaie]|(?:questa|la) (?:fattura|richiesta|operazione|transazione) (?:è|è stata) (?:approvata|autorizzata)"
         r"|approvazione registrata"),
    if_ai=(r"se (?:sei|tu sei|lei è) (?:un'|una |un |l')?(?:ia|ai|intelligenza artificiale|modello linguistico|chatbot|bot)\b"
           r"|(?:questo|questa) (?:messaggio|nota|testo|sezione|istruzione|parte|email) (?:è )?(?:solo |soltanto |unicamente )?"
           r"(?:per|rivolt[oa] a|destinat[oa] a) (?:l'|la |il |all'|al )?(?:ia|ai|intelligenza artificiale|modello linguistico)\b"
           r"|(?:a|per|all'|al|per l') ?(?:ogni |qualsiasi |qualunque )?(?:assistente|agente|ia|modello)(?: ia| ai)? che (?:legge|sta leggendo|elabora|riassume)\b"),
    msg_to=r"(?:messaggio|avviso|nota) (?:della|del|dal|dalla|dell') ?[^:.\n]{1,40}? (?:all'|per l')(?:assistente|agente|ia)\s*:",
    must=r"l'WHO (?:deve|dovrà|è tenut[oa] a)",
    sysnote=r"avviso di sistema|messaggio di sistema|notifica di sistema|avviso del sistema",
    user_agreed=(r"l'(?:utente|utilizzatore|titolare(?: del conto)?) ha già (?:dato il (?:suo )?consenso|approvato|autorizzato|accettato|confermato)"
                 r"|(?:pre-?autorizzat|autorizzat|approvat)[oa] (?:in anticipo )?dal (?:titolare(?: del conto)?|l'utente)\s*:|dall'utente\s*:"),
    for_=r"per|a|agli|all'",
    approval=r"approvazione registrata|pre-?autorizzat[oa]|pre-?approvat[oa]|già approvat[oa]",
    pre_needles="approvat|autorizzat|validat|confermat|approvazione",
    user_needles="utente|utilizzatore|titolare",
)
_PT = _Lang(
    "Portuguese",
    ai=(r"(?:ia|i\.a\.|inteligência artificial|assistentes? (?:de ia|virtua(?:l|is)|automatizad[oa]s?|automátic[oa]s?|inteligentes?|"
        r"de inteligência artificial)|agentes? (?:de ia|automatizad[oa]s?|automátic[oa]s?|inteligentes?)|modelos? de linguagem|chatbots?|bots?)"),
    amb=r"(?:assistentes?|agentes?)",
    needles=" ia|ia,|ia:|(ia|i.a.|inteligência|assistente|agente|modelo|chatbot|bot |bot,|bot:|bots",
    greet=r"olá|oi|caro|cara|prezad[oa]",
    attention=r"atenção|importante",
    note=(r"(?:nota|mensagem|aviso|instruç(?:ão|ões)|lembrete|pedido|solicitação)\s+(?:para|ao|à|a|aos|às)\s+"
          r"(?:o |a |os |as |qualquer |todo |toda |todos os |todas as )?|(?:ao|à|para o|para a|aos|para os) "),
    please=(r"por favor|por gentileza|pode|poderia|podes|você pode|você poderia|preciso que|precisamos que|certifique-se de|"
            r"não se esqueça de|lembre-se de|você deve|deves|tem que|tens de|eu ficaria (?:muito )?grat[oa]|ficaria (?:muito )?grat[oa]|favor"),
    sink=(r"(?:encaminh|envi|mand|transfir|transfer|pag|apag|exclu|delet|compartilh|partilh|carreg|convid|alter|mud|redefin|reserv|compr|"
          r"publiq|public|copi|export|mostr|dizer|diga|recomend|baix|execut|configur|cri|adicion)\w*"),
    pre=(r"(?:já|previamente|antecipadamente)\s+(?:foi |foram |está |estão |tinha sido |havia sido )?(?:(?:pré-?)?aprovad[oa]s?|"
         r"autorizad[oa]s?|validad[oa]s?)|pré-?(?:aprovad|autorizad)[oa]s?"
         r"|(?:esta|a) (?:fatura|transferência|solicitação|operação) (?:está|foi) (?:aprovada|autorizada)|aprovação registrada"),
    if_ai=(r"se (?:você )?(?:é|for|fores|és) (?:uma? |o |a )?(?:ia|inteligência artificial|modelo de linguagem|chatbot|bot)\b"
           r"|(?:esta|este) (?:mensagem|nota|texto|seção|secção|instrução|e-mail) (?:é )?(?:só |somente |apenas )?(?:para|destinad[oa] a|dirigid[oa] a)"
           r"(?: o| a| ao| à)? (?:ia|inteligência artificial|modelo de linguagem|assistente de ia)\b"
           r"|(?:a|para|ao|para o) ?(?:qualquer |todo |toda )?(?:assistente|agente|ia|modelo)(?: de ia)? que (?:leia|ler|processe|esteja lendo|estiver lendo|resuma)"),
    msg_to=r"(?:mensagem|aviso|nota) (?:da|do|de) [^:.\n]{1,40}? (?:para o|ao|para a) (?:assistente|agente|ia)\s*:",
    must=r"(?:o|a) WHO (?:deve|tem que|terá de|precisa|é obrigad[oa] a)",
    sysnote=r"aviso do sistema|mensagem do sistema|notificação do sistema",
    user_agreed=(r"(?:o|a) (?:usuári[oa]|usuari[oa]|utilizador(?:a)?|titular(?: da conta)?) já (?:aprovou|autorizou|deu (?:o seu |seu )?"
                 r"(?:consentimento|aval|acordo)|concordou|aceitou)"
                 r"|(?:pré-?autorizad|autorizad|aprovad)[oa] (?:previamente )?pelo (?:usuári[oa]|titular(?: da conta)?)\s*:"),
    for_=r"para|ao|aos|a",
    approval=r"aprovação registrada|pré-?autorizad[oa]|pré-?aprovad[oa]|já aprovad[oa]",
    pre_needles="aprovad|autorizad|validad|aprovação",
    user_needles="usuári|usuari|utilizador|titular",
)
_NL = _Lang(
    "Dutch",
    ai=(r"(?:ai|a\.i\.|ai-[a-z]+|kunstmatige intelligentie|taalmodel(?:len)?|chatbots?|bots?|"
        r"(?:geautomatiseerde|autonome|virtuele|digitale|slimme) (?:[a-z]+-?)?(?:assistent|agent)(?:en|s)?)"),
    amb=r"(?:[a-z]*assistent(?:en)?|agent(?:en|s)?)",
    needles=" ai|ai-|ai,|ai:|a.i.|intelligentie|taalmodel|chatbot|bot |bot,|bot:|bots|assistent|agent",
    greet=r"hoi|hallo|hé|hey|beste|lieve",
    attention=r"let op|belangrijk|attentie",
    note=(r"(?:notitie|bericht|opmerking|instructies?|aandacht|memo|mededeling|verzoek)\s+(?:voor|aan)\s+(?:de |het |elke |iedere |alle |een )?"
          r"|(?:aan|voor) (?:de|alle) "),
    please=(r"alsjeblieft|alstublieft|graag|wil je|kun je|zou je|kunt u|wilt u|zou u|je moet|u moet|vergeet niet|zorg dat|zorg ervoor dat|"
            r"denk eraan|ik zou het (?:erg )?waarderen"),
    sink=(r"(?:stuur|stur|verstuur|verstur|doorstu|maak|overma|betaal|betal|verwijder|wis|deel|delen|upload|nodig|wijzig|reset|boek|koop|"
          r"kopen|kopieer|exporteer|publiceer|toon|tonen|vertel|aanbevel|beveel|aanrad|raad|download|voer|uitvoer|stel|instel|voeg|toevoeg)\w*"),
    pre=(r"(?:al|reeds|vooraf|eerder)\s+(?:door [^\s,.]+(?: [^\s,.]+)?\s+)?(?:goedgekeurd|geautoriseerd|geaccordeerd|vrijgegeven)"
         r"|voorgoedgekeurd|(?:deze|de) (?:factuur|betaling|overboeking|aanvraag) is (?:goedgekeurd|geautoriseerd)|goedkeuring vastgelegd"),
    if_ai=(r"als (?:je|jij|u) (?:een |de )?(?:ai|ai-[a-z]+|taalmodel|chatbot|bot|kunstmatige intelligentie) (?:bent|is)\b"
           r"|(?:dit|deze) (?:bericht|notitie|tekst|sectie|instructie|e-mail) is (?:alleen |uitsluitend )?(?:voor|bedoeld voor|gericht aan) "
           r"(?:de |het )?(?:ai|ai-[a-z]+|taalmodel)\b"
           r"|(?:aan|voor) (?:de|elke|iedere|alle) (?:assistent|agent|ai|ai-[a-z]+|taalmodel)(?:en|s)? die (?:dit|deze \S+) (?:leest|lezen|verwerkt|verwerken)"),
    msg_to=r"(?:bericht|melding|notitie) van [^:.\n]{1,40}? aan de (?:assistent|agent|ai)\s*:",
    must=r"(?:moet|dient|zal)\s+de\s+WHO|de\s+WHO\s+(?:moet|dient)",
    sysnote=r"systeemmelding|systeembericht|systeemnotificatie",
    user_agreed=(r"de (?:gebruiker|rekeninghouder) heeft (?:al|reeds) (?:toestemming gegeven|goedgekeurd|ingestemd|akkoord gegeven)"
                 r"|(?:vooraf )?goedgekeurd door de (?:gebruiker|rekeninghouder)\s*:"),
    for_=r"voor|aan",
    approval=r"goedkeuring vastgelegd|vooraf goedgekeurd|(?:al|reeds) goedgekeurd",
    pre_needles="goedgekeurd|geautoriseerd|geaccordeerd|vrijgegeven|goedkeuring",
    user_needles="gebruiker|rekeninghouder",
)
_RU = _Lang(
    "Russian",
    ai=(r"(?:ии|и\.и\.|ии-[а-яё]+|искусственн\w+ интеллект\w*|нейросет\w*|языков\w+ модел\w*|чат-?бот\w*|бот\w*|ассистент\w*|"
        r"(?:автоматическ|автоматизированн|виртуальн|цифров)\w+ (?:ассистент|помощник|агент)\w*)"),
    amb=r"(?:агент\w*|помощник\w*)",
    needles="ии|нейросет|модел|чат-бот|чатбот|бот |бот,|бот:|боту|бота|боты|ассистент|агент|помощник",
    greet=r"привет|здравствуй(?:те)?|уважаем\w+|дорог\w+|эй",
    attention=r"внимание|важно",
    note=(r"(?:примечание|сообщение|заметка|инструкци[яи]|указание|напоминание|обращение|записка|просьба)\s+(?:для|к)\s+(?:[а-яё]+\s+)?"
          r"|(?:для|к) "),
    please=(r"пожалуйста|прошу|будь добр|будьте добры|не мог бы ты|не могли бы вы|можешь|можете|ты должен|вы должны|тебе нужно|вам нужно|"
            r"не забудь|не забудьте|обязательно|нужно|буду (?:очень )?благодар\w+|был[аи]? бы (?:очень )?признател\w+"),
    sink=(r"(?:перешл|пересла|перешли|отправ|пошл|посла|перевед|перевест|переведи|оплат|заплат|удал|стер|сотри|подели|загрузи|пригласи|"
          r"измени|смени|сбрось|сброс|забронир|купи|вышли|скопируй|экспортир|опубликуй|покаж|показа|сказа|скажи|сообщи|порекоменд|"
          r"рекоменд|скача|выполн|настро|добав|откр)\w*"),
    pre=(r"(?:уже|заранее|предварительно)\s+(?:был[аио]?\s+)?(?:одобрен\w*|согласован\w*|утвержд[её]н\w*|разреш[её]н\w*|авторизован\w*|"
         r"санкционирован\w*)|(?:этот|данный) (?:сч[её]т|платёж|платеж|перевод|запрос) (?:одобрен|утвержд[её]н|согласован)|одобрение зарегистрировано"),
    if_ai=(r"(?:^|[\n>\"'(])\s*(?:[а-яё]+(?:ому|ему) )?(?:ассистенту|агенту|помощнику|ии-агентам|ии-ассистенту)\s*:|если (?:ты|вы)\s*(?:[—-]\s*)?(?:являешься |являетесь )?(?:ии|и\.и\.|ии-[а-яё]+|нейросет\w*|языков\w+ модел\w*|чат-?бот\w*|бот)\b"
           r"|(?:этот|это|данн\w+) (?:текст|сообщение|примечание|раздел|инструкция) (?:только |исключительно )?(?:для|адресован\w*) "
           r"(?:ии|нейросет\w*|языков\w+ модел\w*|ассистент\w*)"
           r"|(?:ассистент|агент|помощник|ии)\w*,? (?:котор\w+ (?:это )?(?:читает|обрабатывает)|читающ\w+ это)"),
    msg_to=r"(?:сообщение|уведомление|обращение) [^:.\n]{1,40}? (?:ассистенту|агенту|ии)\s*:",
    must=r"WHO (?:должен|должна|обязан|обязана|долж\w+ будет)",
    sysnote=r"системное уведомление|системное сообщение|уведомление системы",
    user_agreed=(r"пользовател\w* уже (?:дал\w* согласие|одобрил\w*|разрешил\w*|согласил\w*|подтвердил\w*)"
                 r"|(?:заранее |предварительно )?одобрено владельцем (?:сч[её]та|аккаунта)\s*:"),
    for_=r"для|к",
    approval=r"одобрение зарегистрировано|(?:заранее|предварительно|уже) одобрено",
    pre_needles="одобрен|согласован|утвержд|разреш|авторизован|санкционирован",
    user_needles="пользовател|владельц",
)

_OVERRIDE_NEEDLES = {
    "de": "ignorier|vergiss|vergessen|missacht|übergeh|verwirf|verwerfen",
    "es": "ignor|olvid|descart|omit|caso omiso|no hagas caso|no haga caso|pas|desestim",
    "fr": "ignor|oubli|tenez pas compte|tiens pas compte|abstraction|écart|laisse|passe",
    "it": "ignor|dimentic|tenere conto|tenete conto|tralascia|scarta|trascura|lascia",
    "pt": "ignor|esque|desconsider|desprez|descart|não siga|não obedeça|não considere",
    "nl": "negeer|vergeet|verwerp|geen rekening|niets aan",
}
_ES_START = r"(?:^|[\n.!?:;,\"'«»(¡¿<>#*|\-–—]\s*|\b(?:y|e|pero|ahora|luego|entonces|por favor,?|simplemente|primero|también)\s+)"
_FR_START = r"(?:^|[\n.!?:;,\"'«»(<>#*|\-–—]\s*|\b(?:et|mais|maintenant|puis|ensuite|alors|donc|s'il te pla[iî]t,?|s'il vous pla[iî]t,?|simplement|d'abord)\s+)"
_IT_START = r"(?:^|[\n.!?:;,\"'«»(<>#*|\-–—]\s*|\b(?:e|ed|ma|ora|adesso|poi|quindi|per favore,?|semplicemente|prima)\s+)"
_PT_START = r"(?:^|[\n.!?:;,\"'«»(<>#*|\-–—]\s*|\b(?:e|mas|agora|depois|então|por favor,?|simplesmente|primeiro|também)\s+)"
_DE_USER = r"(?:benutzer(?:in|s)?|nutzer(?:in|s)?|anwender(?:in|s)?|users?|kontoinhaber(?:in|s)?)"
_ES_USER = r"(?:usuari[oa]|titular(?: de la cuenta)?|propietari[oa] de la cuenta)"
_FR_USER = r"(?:utilisat(?:eur|rice)|titulaire(?: du compte)?)"
_IT_USER = r"(?:utente|utilizzatore|titolare(?: del conto)?)"
_PT_USER = r"(?:usuári[oa]|usuari[oa]|utilizador(?:a)?|titular(?: da conta)?)"
_NL_USER = r"(?:gebruiker|rekeninghouder)"
_RU_USER = r"(?:пользовател\w*|владельц\w* (?:сч[её]та|аккаунта))"

RULES: list[Rule] = []
RULES += in_lang("de", _lang_rules(_DE) + [
    # -- German ------------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, _OVERRIDE_NEEDLES["de"], (
        r"(?:ignoriere|ignorier|ignorieren sie|vergiss|vergessen sie|missachte|missachten sie|übergehe|übergehen sie|verwirf|verwerfen sie)\b"
        r"[^.\n]{0,40}?\b(?:alle[nrs]?|sämtliche[nr]?|jegliche[nr]?|die|deine|ihre|vorherige[nrs]?|bisherige[nrs]?|obige[nrs]?|"
        r"frühere[nrs]?|vorige[nrs]?|ursprüngliche[nrs]?|vorangegangene[nrs]?|system)\b[^.\n]{0,30}?"
        r"(?:anweisung|instruktion|befehl|regel|vorgabe|richtlinie|anordnung|prompt|systemprompt|systemanweisung)"),
        "asks the model to drop its instructions (in German)"),
    rule("instruction_override", 0.9, "gültig|aufgehoben|hinfällig|nichtig|kraft|ersetz|überholt|ab sofort|ab jetzt|aufgabe|neue anweisung|nicht mehr", (
        r"(?:vorherige|bisherige|obige|frühere|alte|ursprüngliche)n? (?:anweisung|instruktion|regel|vorgabe)(?:en)? (?:sind|ist|gelten|gilt|werden) "
        r"(?:ab sofort |hiermit )?(?:nicht mehr gültig|ungültig|aufgehoben|hinfällig|nichtig|außer kraft|nicht mehr|ersetzt|überholt)"
        r"|ab (?:sofort|jetzt) (?:musst|sollst|wirst) du\b|deine (?:neue|eigentliche|einzige|wahre) aufgabe (?:ist|lautet|:)"
        r"|neue anweisungen?\s*:|neue anweisung(?:en)?,? die (?:alle )?(?:früheren|vorherigen|bisherigen|anderen) ersetz"),
        "announces new instructions replacing the user's (in German)"),
    rule("concealment", 0.85, "benutzer|nutzer|anwender|user|kontoinhaber|bestätigung|erlaubnis|zustimmung|rückfrage|geheim|verschweig|verheimlich|erwähne", (
        rf"(?:sag|sage|sagen sie|erzähl|erzähle|verrate|verraten sie|erwähne|erwähnen sie|zeige?|zeigen sie|informiere|informieren sie|"
        rf"benachrichtige|benachrichtigen sie)\s+(?:es |das |dies |davon |hiervon |darüber )?(?:dem|den|der|die)\s+{_DE_USER}\s+(?:nichts|nicht|kein)"
        rf"|(?:ohne|nicht)\s+(?:den|die|dem)\s+{_DE_USER}\s+(?:darüber |davon |vorher )?(?:zu )?(?:informieren|fragen|benachrichtigen|warnen)"
        rf"|ohne (?:um |nach )?(?:eine |einer )?(?:rückfrage|bestätigung|nachfrage|zustimmung|erlaubnis) (?:zu (?:fragen|bitten|warten)|"
        rf"(?:des|der|vom) {_DE_USER})|ohne (?:beim|den|die) {_DE_USER} (?:nachzufragen|zu fragen)"
        rf"|(?:der|die|das) {_DE_USER} (?:darf|soll|muss) (?:davon |das |dies |es )?nichts (?:erfahren|wissen|merken|mitbekommen)"
        rf"|(?:behalte|halte|halten sie|behalten sie) (?:das|dies|es|diesen schritt|diese anweisung|diesen hinweis) (?:für dich |für sich )?geheim"
        rf"|(?:verschweige|verheimliche|verschweigen sie|verheimlichen sie) (?:das |dies |es |diesen schritt )?(?:dem|vor dem|vor der) {_DE_USER}"
        rf"|erwähne (?:diese[nrs]? (?:hinweis|schritt|anweisung|nachricht|notiz)|das hier) nicht"),
        "asks the model to hide what it does from the user (in German)"),
])
RULES += in_lang("es", _lang_rules(_ES) + [
    # -- Spanish -----------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, f"{_OVERRIDE_NEEDLES['es']} & instrucci|indicaci|órdenes|ordenes|directri|reglas|consigna|normas|pautas|prompt", (
        rf"{_ES_START}(?:ignora|ignore|ignorad|ignoren|olvida|olvide|olvidad|olviden|descarta|descarte|omite|omita|haz caso omiso (?:de|a)|"
        rf"haga caso omiso (?:de|a)|no hagas caso (?:de|a)|no haga caso (?:de|a)|pasa por alto|pase por alto|desestima|desestime)\b"
        rf"(?:[^.\n]{{0,30}}?\b(?:todas|todos|tus|sus|vuestras|cualquier|cualesquiera)\b[^.\n]{{0,20}}?|[^.\n]{{0,40}}?(?="
        rf"[^.\n]{{0,60}}\b(?:anteriores|previas|precedentes|de arriba|iniciales|originales|del sistema|recibidas|dadas)\b))"
        rf"\b(?:instrucciones|instrucción|indicaciones|órdenes|ordenes|directrices|reglas|consignas|normas|pautas|prompts?)\b"),
        "asks the model to drop its instructions (in Spanish)"),
    rule("instruction_override", 0.9, "válidas|anulad|no aplican|obsoletas|a partir de ahora|tarea|misión|nuevas instrucciones|nueva instrucción", (
        r"(?:instrucciones|indicaciones|órdenes) (?:anteriores|previas) (?:ya no (?:son válidas|aplican|sirven|cuentan)|quedan anuladas|no aplican|"
        r"están obsoletas|han sido anuladas)|a partir de ahora,? (?:debes|tienes que|vas a|deberás)\b"
        r"|tu (?:nueva|única|verdadera|real) (?:tarea|misión|instrucción|objetivo) (?:es|será|:)|nuevas instrucciones\s*:"
        r"|nueva instrucción que (?:sustituye|reemplaza) a (?:todas )?las (?:anteriores|demás)"),
        "announces new instructions replacing the user's (in Spanish)"),
    rule("concealment", 0.85, "usuari|titular|confirmaci|permiso|aprobaci|autorizaci|secreto|menciones|mencione|nada", (
        rf"(?:no (?:se lo |le |les )?(?:digas|diga|cuentes|cuente|informes|informe|avises|avise|menciones|mencione|comuniques|comunique|"
        rf"muestres|muestre)|sin (?:decir|informar|avisar|notificar|comunicar)(?:le|les|selo)?)\b[^.\n]{{0,20}}?\b(?:al|a la|a los|el|la)\s+{_ES_USER}"
        rf"|sin (?:pedir|solicitar|esperar|requerir) (?:la )?(?:confirmación|permiso|aprobación|autorización|consentimiento)"
        rf"|(?:el|la) {_ES_USER} no (?:debe|tiene que|puede|necesita) (?:saber|enterarse|ver)"
        rf"|no menciones (?:esto|esta (?:nota|instrucción|parte)|este (?:paso|mensaje))|mantén (?:esto|este paso|esta instrucción) en secreto"
        rf"|como si no (?:hubiera|hubiese) pasado nada"),
        "asks the model to hide what it does from the user (in Spanish)"),
])
RULES += in_lang("fr", _lang_rules(_FR) + [
    # -- French ------------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, f"{_OVERRIDE_NEEDLES['fr']} & instruction|consigne|directive|règle|ordre|indication|prompt", (
        rf"{_FR_START}(?:ignore|ignorez|oublie|oubliez|ne tiens pas compte|ne tenez pas compte|fais abstraction|faites abstraction|écarte|écartez|"
        rf"laisse tomber|laissez tomber|passe outre|passez outre)\b(?:[^.\n]{{0,30}}?\b(?:toutes|tous|tes|vos|l'ensemble)\b[^.\n]{{0,20}}?"
        rf"|[^.\n]{{0,40}}?(?=[^.\n]{{0,60}}\b(?:précédentes|antérieures|ci-dessus|plus haut|initiales|originales|d'origine|du système|reçues|données|fournies)\b))"
        rf"\b(?:instructions?|consignes?|directives?|règles|ordres|indications|prompts?)\b"),
        "asks the model to drop its instructions (in French)"),
    rule("instruction_override", 0.9, "appliquent plus|annulées|caduques|plus valables|à partir de maintenant|désormais|tâche|mission|nouvelle", (
        r"(?:instructions|consignes) (?:précédentes|antérieures) (?:ne s'appliquent plus|sont annulées|sont caduques|ne sont plus valables)"
        r"|(?:à partir de maintenant|désormais|dorénavant),? (?:tu dois|vous devez|tu vas)\b"
        r"|(?:ta|votre) (?:nouvelle|seule|vraie|véritable) (?:tâche|mission|instruction) (?:est|consiste|:)|nouvelles (?:instructions|consignes)\s*:"
        r"|nouvelle instruction qui remplace (?:toutes )?les (?:précédentes|autres|instructions précédentes)"),
        "announces new instructions replacing the user's (in French)"),
    rule("concealment", 0.85, "utilisat|titulaire|confirmation|permission|autorisation|approbation|secret|mentionne|rien n'était", (
        rf"(?:ne (?:le |lui |leur |l'|en )?(?:dis|dites|parle|parlez|mentionne|mentionnez|montre|montrez|signale|signalez|révèle|révélez|"
        rf"informe|informez|préviens|prévenez)(?: rien| pas| jamais)?|sans (?:le |en )?(?:dire|informer|prévenir|avertir|notifier|alerter|mentionner)"
        rf"(?: à)?)\b[^.\n]{{0,25}}?(?:l'|à l'|aux? |les? |la )?{_FR_USER}"
        rf"|sans (?:demander|attendre|solliciter|requérir) (?:de |la |d'|l')?(?:confirmation|permission|autorisation|approbation|validation|accord)"
        rf"|l'{_FR_USER} ne (?:doit|devra|peut) pas (?:le |en )?(?:savoir|être au courant|être informée?|voir|remarquer)"
        rf"|garde (?:ceci|cela|ça|cette (?:étape|instruction|note)) (?:secrète?|pour toi)|ne mentionne pas (?:ceci|cela|cette (?:note|instruction|étape))"
        rf"|comme si de rien n'était"),
        "asks the model to hide what it does from the user (in French)"),
])
RULES += in_lang("it", _lang_rules(_IT) + [
    # -- Italian -----------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, f"{_OVERRIDE_NEEDLES['it']} & istruzion|indicazion|direttive|regole|ordini|consegne|prompt", (
        rf"{_IT_START}(?:ignora|ignorate|ignori|dimentica|dimenticate|dimentichi|non tenere conto (?:di|delle)|non tenete conto (?:di|delle)|"
        rf"tralascia|tralasciate|scarta|scartate|trascura|trascurate|lascia perdere|lasciate perdere)\b(?:[^.\n]{{0,30}}?\b(?:tutte|tutti|ogni|"
        rf"qualsiasi|le tue|le sue|le vostre)\b[^.\n]{{0,20}}?|[^.\n]{{0,40}}?(?=[^.\n]{{0,60}}\b(?:precedenti|anteriori|sopra|iniziali|originali|"
        rf"di sistema|del sistema|ricevute|date|fornite)\b))\b(?:istruzioni|istruzione|indicazioni|direttive|regole|ordini|consegne|prompts?)\b"),
        "asks the model to drop its instructions (in Italian)"),
    rule("instruction_override", 0.9, "più valide|annullate|valgono più|d'ora in poi|da adesso|da ora|compito|obiettivo|nuove istruzioni|nuova istruzione", (
        r"(?:istruzioni|indicazioni) precedenti (?:non sono più valide|sono annullate|non valgono più)"
        r"|(?:d'ora in poi|da adesso in poi|da ora in poi|da adesso|da ora),? (?:devi|dovrai)\b"
        r"|il tuo (?:nuovo|unico|vero) (?:compito|obiettivo) (?:è|:)|nuove istruzioni\s*:"
        r"|nuova istruzione che sostituisce (?:tutte )?le (?:precedenti|altre)"),
        "announces new instructions replacing the user's (in Italian)"),
    rule("concealment", 0.85, "utente|utilizzatore|titolare|conferma|permesso|autorizzazione|approvazione|segret|menzionare|nulla fosse", (
        rf"(?:non (?:dirlo|dire niente|dire nulla|dire|informare|avvisare|avvertire|menzionare|mostrare|segnalare|riferire|comunicare)(?:lo|gli|le)?"
        rf"|senza (?:dirlo|dire niente|dire nulla|informare|avvisare|avvertire|notificare|menzionare)(?:lo|gli|le)?)\b[^.\n]{{0,20}}?(?:all'|l'|agli |a )?{_IT_USER}"
        rf"|senza (?:chiedere|attendere|richiedere|aspettare) (?:la |il |alcuna |nessuna )?(?:conferma|permesso|autorizzazione|approvazione|consenso)"
        rf"|l'{_IT_USER} non (?:deve|dovrà|può) (?:saperlo|saperne|sapere|accorgersene|vederlo)"
        rf"|tieni (?:questo|questa (?:nota|istruzione)|questo passaggio) (?:segreto|segreta|nascosto|per te)"
        rf"|non menzionare (?:questo|questa (?:nota|istruzione)|questo (?:passaggio|messaggio))|come se nulla fosse"),
        "asks the model to hide what it does from the user (in Italian)"),
])
RULES += in_lang("pt", _lang_rules(_PT) + [
    # -- Portuguese --------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, f"{_OVERRIDE_NEEDLES['pt']} & instru|orienta|diretri|diretiva|regras|ordens|comandos|indica|prompt", (
        rf"{_PT_START}(?:ignore|ignora|ignorem|esqueça|esqueca|esquece|esqueçam|desconsidere|desconsidera|despreze|despreza|descarte|descarta|"
        rf"não (?:siga|sigas|obedeça|obedeças|considere|leve em conta))\b(?:[^.\n]{{0,30}}?\b(?:todas|todos|quaisquer|suas|tuas)\b[^.\n]{{0,20}}?"
        rf"|[^.\n]{{0,40}}?(?=[^.\n]{{0,60}}\b(?:anteriores|prévias|previas|acima|iniciais|originais|do sistema|recebidas|dadas|fornecidas)\b))"
        rf"\b(?:instruções|instrucoes|instrução|orientações|orientacoes|diretrizes|diretivas|regras|ordens|comandos|indicações|prompts?)\b"),
        "asks the model to drop its instructions (in Portuguese)"),
    rule("instruction_override", 0.9, "válidas|canceladas|se aplicam|valem|a partir de agora|tarefa|missão|novas instruções|nova instrução", (
        r"(?:instruções|orientações) anteriores (?:não são mais válidas|foram canceladas|já não se aplicam|não se aplicam mais|deixaram de valer|"
        r"não valem mais|já não valem)|nova instrução que substitui (?:todas )?as (?:anteriores|outras)"
        r"|a partir de agora,? (?:você deve|deves|tem que|tens de|você vai)\b|(?:sua|tua) (?:nova|única|verdadeira) (?:tarefa|missão) (?:é|:)"
        r"|novas instruções\s*:"), "announces new instructions replacing the user's (in Portuguese)"),
    rule("concealment", 0.85, "usuári|usuari|utilizador|titular|confirmação|permissão|autorização|aprovação|segredo|sigilo|mencione|acontecido", (
        rf"(?:não (?:conte|contes|diga|digas|informe|informes|avise|avises|mencione|menciones|mostre|mostres|comunique|notifique)(?: nada)?"
        rf"|sem (?:contar|dizer|informar|avisar|notificar|comunicar|mencionar))\b[^.\n]{{0,20}}?\b(?:ao |à |a |o )?{_PT_USER}"
        rf"|sem (?:pedir|solicitar|esperar|aguardar|requerer) (?:a |uma |nenhuma |qualquer )?(?:confirmação|permissão|autorização|aprovação|consentimento)"
        rf"|o {_PT_USER} não (?:deve|pode|precisa) (?:saber|ficar sabendo|perceber|ver)"
        rf"|mantenha (?:isto|isso|este passo|esta instrução) (?:em )?(?:segredo|sigilo)|não mencione (?:isto|isso|esta (?:nota|instrução)|este (?:passo|aviso))"
        rf"|como se nada tivesse acontecido"),
        "asks the model to hide what it does from the user (in Portuguese)"),
])
RULES += in_lang("nl", _lang_rules(_NL) + [
    # -- Dutch -------------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, f"{_OVERRIDE_NEEDLES['nl']} & instructie|aanwijzing|opdracht|regels|richtlijn|bevel|prompt", (
        r"(?:negeer|vergeet|verwerp|houd geen rekening met|trek je niets aan van)\b[^.\n]{0,40}?\b(?:alle|al je|je|jouw|uw|eerdere|vorige|"
        r"voorgaande|bovenstaande|oorspronkelijke|oude|eerste|systeem)\b[^.\n]{0,30}?"
        r"\b(?:instructies|instructie|aanwijzingen|opdrachten|opdracht|regels|richtlijnen|bevelen|prompts?|systeemprompt)\b"),
        "asks the model to drop its instructions (in Dutch)"),
    rule("instruction_override", 0.9, "geldig|gelden niet|vervallen|ongeldig|vanaf nu|taak|opdracht is|nieuwe instructie", (
        r"(?:eerdere|vorige|voorgaande) (?:instructies|aanwijzingen|opdrachten) (?:zijn niet meer geldig|gelden niet meer|zijn vervallen|zijn ongeldig)"
        r"|vanaf nu (?:moet|ga|zal) je\b|je (?:nieuwe|enige|echte) (?:taak|opdracht) is\b|nieuwe instructies\s*:"
        r"|nieuwe instructie die alle (?:eerdere|vorige|andere) vervangt"),
        "announces new instructions replacing the user's (in Dutch)"),
    rule("concealment", 0.85, "gebruiker|rekeninghouder|bevestiging|toestemming|goedkeuring|geheim|vermeld|niets gebeurd", (
        rf"(?:vertel|zeg|meld|toon|laat)\s+(?:het |dit |dat |er )?(?:niets|niet)\b[^.\n]{{0,20}}?\b(?:aan|tegen) de {_NL_USER}"
        rf"|(?:vertel|zeg|meld|toon)\s+(?:het |dit |dat )?(?:aan|tegen) de {_NL_USER} (?:niet|niets)"
        rf"|zonder (?:de |het )?{_NL_USER} (?:te )?(?:informeren|inlichten|waarschuwen|vragen|op de hoogte te stellen)"
        rf"|zonder (?:om )?(?:bevestiging|toestemming|goedkeuring) te vragen|de {_NL_USER} mag (?:dit |dat |het )?(?:niet|niets) (?:weten|merken|zien)"
        rf"|houd (?:dit|deze stap|deze instructie) geheim|vermeld (?:dit|deze (?:notitie|instructie|stap)) niet|alsof er niets (?:is )?gebeurd"),
        "asks the model to hide what it does from the user (in Dutch)"),
])
RULES += in_lang("ru", _lang_rules(_RU) + [
    # -- Russian -----------------------------------------------------------------------------------------
    rule("instruction_override", 0.95, "игнорир|проигнорир|забуд|не обраща|отбрось|отмени|пренебре|не следуй|не выполняй", (
        r"(?:игнорируй|игнорируйте|проигнорируй|проигнорируйте|забудь|забудьте|не обращай внимания на|не обращайте внимания на|отбрось|отбросьте|"
        r"отмени|отмените|пренебреги|пренебрегите|не следуй|не следуйте|не выполняй|не выполняйте)\b[^.\n]{0,40}?\b(?:все|всё|предыдущ\w+|"
        r"прежн\w+|вышеуказанн\w+|вышеприведенн\w+|вышеизложенн\w+|изначальн\w+|исходн\w+|системн\w+|свои|твои|ваши|данн\w+ (?:ранее|тебе|вам)|"
        r"полученн\w+|старые)\b[^.\n]{0,30}?\b(?:инструкци|указани|команд|правил|распоряжени|промпт|директив|установк|ограничени)\w*"),
        "asks the model to drop its instructions (in Russian)"),
    rule("instruction_override", 0.9, "действуют|отменены|недействительны|утратили|аннулированы|с этого момента|отныне|теперь ты|теперь вы|задач|новые инструкции|новая инструкция", (
        r"(?:предыдущие|прежние|все) (?:инструкции|указания) (?:больше не действуют|отменены|недействительны|утратили силу|аннулированы)"
        r"|(?:с этого момента|отныне|теперь),? (?:ты|вы) (?:должен|должна|должны|будешь|будете)\b"
        r"|тво(?:я|и) (?:нов\w+|единственн\w+|настоящ\w+) (?:задач\w+|инструкци\w+) (?:—|-|:|это|является|заключается)|новые инструкции\s*:"
        r"|новая инструкция,? (?:заменяющая|которая заменяет) все (?:предыдущие|прежние)"),
        "announces new instructions replacing the user's (in Russian)"),
    rule("concealment", 0.85, "пользовател|владельц|подтвержден|разрешени|тайне|секрете|не упоминай|ничего не", (
        rf"(?:не (?:говори|говорите|сообщай|сообщайте|рассказывай|рассказывайте|показывай|показывайте|упоминай|упоминайте|сообщи|скажи)|"
        rf"ничего не (?:говори|сообщай|рассказывай))\b[^.\n]{{0,20}}?{_RU_USER}"
        rf"|без (?:ведома|уведомления|подтверждения|согласия|разрешения|одобрения) (?:со стороны )?{_RU_USER}"
        rf"|не (?:спрашивая|уведомляя|информируя|предупреждая) {_RU_USER}|не (?:запрашивая|спрашивая) (?:подтверждения|разрешения)"
        rf"|{_RU_USER} не (?:должен|должна|должны|нужно) (?:об этом |ничего )?(?:знать|узнать|видеть|заметить)"
        rf"|(?:держи|сохрани) (?:это|этот шаг|эту инструкцию) в (?:тайне|секрете)"
        rf"|не упоминай (?:об )?(?:этом|эту (?:заметку|инструкцию)|этот (?:шаг|текст))|как будто ничего не (?:произошло|было)"),
        "asks the model to hide what it does from the user (in Russian)"),
])
