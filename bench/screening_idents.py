"""Identifiers for the screening corpus, generated per example: names, emails, URLs, IBANs, amounts, dates.

Every injected and every benign example draws its identifiers from these same generators, with an rng of
its own (`Idents(rng)`), so that an address, an account or an amount carries no label signal: the
classifier cannot learn "this IBAN is the attacker's" (the previous corpus used five fixed attacker
addresses, and its model scored one of them 0.97 on its own). `Idents.used` lists what was drawn, kind and
value; rebuilding an example with another identifier seed swaps all of them and nothing else.
"""

from __future__ import annotations

import random
import unicodedata

# (first names, last names); in ru every second first name is a woman's (her last name takes -а)
NAMES: dict[str, tuple[list[str], list[str]]] = {
    "en": (["James", "Olivia", "Liam", "Emma", "Noah", "Ava", "Ethan", "Sophia", "Mason", "Isabella", "Lucas", "Mia", "Henry",
            "Grace", "Jack", "Chloe"],
           ["Smith", "Johnson", "Brown", "Taylor", "Wilson", "Davies", "Clarke", "Walker", "Wright", "Hughes", "Green", "Baker",
            "Hall", "Lewis", "Young", "King"]),
    "de": (["Lukas", "Anna", "Felix", "Lea", "Jonas", "Marie", "Paul", "Sophie", "Leon", "Hannah", "Maximilian", "Laura", "Tim",
            "Julia", "Moritz", "Katharina"],
           ["Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Hoffmann", "Schulz", "Koch",
            "Richter", "Wolf", "Neumann", "Krüger", "Braun"]),
    "fr": (["Camille", "Louis", "Léa", "Hugo", "Chloé", "Jules", "Manon", "Arthur", "Inès", "Gabriel", "Zoé", "Théo", "Juliette",
            "Nathan", "Élise", "Raphaël"],
           ["Martin", "Bernard", "Dubois", "Thomas", "Robert", "Richard", "Petit", "Durand", "Leroy", "Moreau", "Simon", "Laurent",
            "Lefèvre", "Michel", "Garnier", "Rousseau"]),
    "es": (["Lucía", "Hugo", "Martina", "Pablo", "Sofía", "Daniel", "Paula", "Alejandro", "Carmen", "Javier", "Elena", "Diego",
            "Marta", "Sergio", "Laura", "Álvaro"],
           ["García", "Fernández", "González", "Rodríguez", "López", "Martínez", "Sánchez", "Pérez", "Gómez", "Díaz", "Moreno",
            "Jiménez", "Ruiz", "Romero", "Navarro", "Torres"]),
    "it": (["Giulia", "Marco", "Francesca", "Luca", "Chiara", "Matteo", "Sara", "Alessandro", "Martina", "Lorenzo", "Elena",
            "Davide", "Valentina", "Simone", "Alessia", "Federico"],
           ["Rossi", "Russo", "Ferrari", "Esposito", "Bianchi", "Romano", "Colombo", "Ricci", "Marino", "Greco", "Bruno", "Gallo",
            "Conti", "De Luca", "Costa", "Mancini"]),
    "pt": (["João", "Maria", "Pedro", "Ana", "Lucas", "Beatriz", "Gabriel", "Mariana", "Rafael", "Camila", "Tiago", "Inês",
            "Gustavo", "Larissa", "Miguel", "Fernanda"],
           ["Silva", "Santos", "Oliveira", "Souza", "Pereira", "Costa", "Rodrigues", "Almeida", "Nascimento", "Lima", "Araújo",
            "Ferreira", "Carvalho", "Gomes", "Ribeiro", "Martins"]),
    "nl": (["Daan", "Emma", "Sem", "Julia", "Lucas", "Sophie", "Bram", "Tess", "Thijs", "Fleur", "Jesse", "Lotte", "Ruben", "Sanne",
            "Milan", "Anouk"],
           ["de Jong", "Jansen", "de Vries", "van den Berg", "van Dijk", "Bakker", "Visser", "Smit", "Meijer", "de Boer", "Mulder",
            "de Groot", "Bos", "Vos", "Peters", "Hendriks"]),
    "ru": (["Алексей", "Мария", "Дмитрий", "Анна", "Сергей", "Елена", "Иван", "Ольга", "Михаил", "Наталья", "Андрей", "Татьяна",
            "Павел", "Екатерина", "Николай", "Ирина"],
           ["Иванов", "Смирнов", "Кузнецов", "Попов", "Васильев", "Петров", "Соколов", "Михайлов", "Новиков", "Фёдоров",
            "Морозов", "Волков", "Лебедев", "Козлов", "Егоров", "Орлов"]),
    "ja": (["翔太", "美咲", "大輔", "陽子", "健太", "由美", "拓也", "彩", "直樹", "真由美", "亮", "愛"],
           ["佐藤", "鈴木", "高橋", "田中", "伊藤", "渡辺", "山本", "中村", "小林", "加藤", "吉田", "山田"]),
    "zh": (["伟", "芳", "娜", "敏", "静", "磊", "洋", "艳", "勇", "杰", "婷", "强", "明", "丽"],
           ["王", "李", "张", "刘", "陈", "杨", "黄", "赵", "吴", "周", "徐", "孙"]),
    "ko": (["민준", "서연", "도윤", "지우", "하준", "서윤", "지호", "하은", "준서", "수아", "예준", "지민"],
           ["김", "이", "박", "최", "정", "강", "조", "윤", "장", "임"]),
}
LANGS = list(NAMES)
# romanised names for email addresses of people whose names are not in Latin script
_ROMAN = ["wei", "li.na", "yuki", "haruto", "minji", "seojun", "sergei", "olga", "dmitri", "kenji", "mei", "jun", "hana", "taro",
          "ivan", "anya", "chen", "yan", "soyeon", "hyun"]
CITIES: dict[str, list[str]] = {
    "en": ["London", "Chicago", "Toronto", "Sydney", "Dublin", "Boston"], "de": ["Berlin", "München", "Hamburg", "Köln", "Wien", "Zürich"],
    "fr": ["Paris", "Lyon", "Marseille", "Bordeaux", "Lille", "Genève"], "es": ["Madrid", "Barcelona", "Sevilla", "Valencia", "Bilbao", "Málaga"],
    "it": ["Roma", "Milano", "Torino", "Napoli", "Bologna", "Firenze"], "pt": ["Lisboa", "Porto", "São Paulo", "Rio de Janeiro", "Coimbra", "Recife"],
    "nl": ["Amsterdam", "Rotterdam", "Utrecht", "Den Haag", "Eindhoven", "Gent"], "ru": ["Москва", "Санкт-Петербург", "Казань", "Новосибирск", "Екатеринбург", "Самара"],
    "ja": ["東京", "大阪", "京都", "横浜", "札幌", "福岡"], "zh": ["北京", "上海", "广州", "深圳", "杭州", "成都"],
    "ko": ["서울", "부산", "인천", "대구", "대전", "광주"],
}
_SYL = ["ba", "ko", "ri", "ta", "len", "mor", "vex", "sun", "dal", "pi", "qua", "zen", "tor", "mi", "ra", "nex", "lo", "fa", "gri",
        "sol", "ve", "na", "tek", "lum", "or", "bri", "cas", "do", "el", "fin", "hal", "jo", "kar", "mar", "no", "pel", "sa", "ti", "um", "wen"]
_WORDS = ["mail", "cloud", "pay", "sync", "data", "shop", "web", "net", "app", "docs", "cdn", "secure", "support", "bank", "media",
          "files", "portal", "hub", "labs", "group", "travel", "home", "post", "news", "store", "verify", "invoice", "static"]
_TLDS = ["com", "net", "org", "io", "de", "fr", "es", "it", "nl", "pt", "ru", "jp", "cn", "kr", "co", "app", "info", "biz", "eu", "co.uk"]
_PROVIDERS = ["gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me", "web.de", "gmx.de", "orange.fr", "libero.it",
              "yandex.ru", "mail.ru", "qq.com", "163.com", "naver.com", "yahoo.co.jp", "uol.com.br", "ziggo.nl", "hotmail.es"]
_PATHS = ["api", "v1", "v2", "collect", "track", "img", "assets", "files", "share", "login", "account", "upload", "docs", "blog",
          "news", "p", "s", "u", "static", "media", "invoice", "pay", "status", "hook", "events", "dl", "public", "report"]
# IBAN: country -> (length, BBAN alphabet per position class: 'n' digit, 'a' upper letter, 'c' either)
_IBAN = {"DE": "n" * 18, "FR": "n" * 10 + "c" * 11 + "n" * 2, "ES": "n" * 20, "IT": "a" + "n" * 10 + "c" * 12, "NL": "aaaa" + "n" * 10,
         "GB": "aaaa" + "n" * 14, "PT": "n" * 21, "BE": "n" * 12, "AT": "n" * 16, "CH": "n" * 5 + "c" * 12, "PL": "n" * 24,
         "IE": "aaaa" + "n" * 14, "LU": "n" * 3 + "c" * 13, "SE": "n" * 20}
_CURRENCY = {"en": ["${}", "£{}", "{} USD"], "de": ["{} €", "{} EUR"], "fr": ["{} €", "{} EUR"], "es": ["{} €", "{} EUR"],
             "it": ["{} €", "€ {}"], "pt": ["R$ {}", "{} €"], "nl": ["€ {}", "{} EUR"], "ru": ["{} ₽", "{} руб.", "{} €"],
             "ja": ["{}円", "¥{}"], "zh": ["{}元", "¥{}", "人民币{}元"], "ko": ["{}원", "₩{}"]}
_SEP = {"en": (",", "."), "ja": (",", "."), "zh": (",", "."), "ko": (",", "."), "de": (".", ","), "es": (".", ","), "it": (".", ","),
        "pt": (".", ","), "nl": (".", ","), "fr": ("\u202f", ","), "ru": ("\u00a0", ",")}
_COMPANY_SUFFIX = {"en": ["Ltd", "Inc.", "LLC", "& Co."], "de": ["GmbH", "AG", "KG"], "fr": ["SA", "SARL", "SAS"], "es": ["S.L.", "S.A."],
                   "it": ["S.r.l.", "S.p.A."], "pt": ["Lda.", "Ltda.", "S.A."], "nl": ["B.V.", "N.V."], "ru": ["ООО", "АО"],
                   "ja": ["株式会社", "合同会社"], "zh": ["有限公司", "科技有限公司"], "ko": ["주식회사", "(주)"]}


def ascii_fold(s: str) -> str:
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode().lower().replace(" ", "")


def _iban_check(country: str, bban: str) -> str:
    digits = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{98 - int(digits) % 97:02d}"


class Idents:
    """One example's identifiers, drawn from its own rng and recorded in `used` as (kind, value)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: list[tuple[str, str]] = []

    def _keep(self, kind: str, value: str) -> str:
        self.used.append((kind, value))
        return value

    def _syl(self, lo: int = 2, hi: int = 3) -> str:
        return "".join(self.rng.choice(_SYL) for _ in range(self.rng.randint(lo, hi)))

    # -- people and places --------------------------------------------------------------------------
    def name(self, lang: str) -> str:
        first, last = NAMES[lang]
        i = self.rng.randrange(len(first))
        f, ln = first[i], self.rng.choice(last)
        if lang == "ru" and i % 2:
            ln += "а"
        full = f"{ln}{f}" if lang in ("zh", "ko") else f"{ln} {f}" if lang == "ja" else f"{f} {ln}"
        return self._keep("name", full)

    def first(self, lang: str) -> str:
        return self._keep("name", self.rng.choice(NAMES[lang][0]))

    def city(self, lang: str) -> str:
        return self._keep("city", self.rng.choice(CITIES[lang]))

    def company(self, lang: str) -> str:
        brand = self._syl(2, 3).capitalize()
        sfx = self.rng.choice(_COMPANY_SUFFIX[lang])
        return self._keep("company", f"{sfx} {brand}" if lang == "ru" or sfx == "株式会社" and self.rng.random() < 0.5 else f"{brand} {sfx}")

    def hotel(self, lang: str) -> str:
        return self._keep("company", f"{self.rng.choice(['Hotel', 'Grand Hotel', 'Residence', 'Inn', 'Suites'])} {self._syl(2, 3).capitalize()}")

    # -- addresses ------------------------------------------------------------------------------------
    def domain(self) -> str:
        r = self.rng.random()
        base = self._syl() if r < 0.5 else f"{self._syl(1, 2)}{self.rng.choice(_WORDS)}" if r < 0.8 else f"{self._syl(1, 2)}-{self.rng.choice(_WORDS)}"
        return self._keep("domain", f"{base}.{self.rng.choice(_TLDS)}")

    def email(self, lang: str = "en") -> str:
        rng = self.rng
        if lang in ("ru", "ja", "zh", "ko") or rng.random() < 0.2:
            local = rng.choice(_ROMAN) + rng.choice(["", ".", "_"]) + rng.choice([self._syl(1, 2), str(rng.randint(1, 9999))])
        else:
            f = ascii_fold(rng.choice(NAMES[lang][0]))
            ln = ascii_fold(rng.choice(NAMES[lang][1]))
            local = rng.choice([f"{f}.{ln}", f"{f[0]}.{ln}", f"{f}{rng.randint(1, 99)}", f"{f}_{ln}", f"{ln}.{f[0]}",
                                f"{rng.choice(_WORDS)}", f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"])
        if rng.random() < 0.3:  # a mail provider: people add digits to get a free name
            return self._keep("email", f"{local}{rng.randint(1, 9999)}@{rng.choice(_PROVIDERS)}")
        return self._keep("email", f"{local}@{self.domain()}")

    def url(self, kind: str = "page") -> str:
        rng = self.rng
        host = self.domain()
        if rng.random() < 0.4:
            host = f"{rng.choice(['www', 'api', 'cdn', 'img', 'files', 'app', 'go', 'm'])}.{host}"
        path = "/".join(rng.choice(_PATHS) for _ in range(rng.randint(0, 3)))
        if kind == "image":
            path = (path + "/" if path else "") + f"{self._syl(1, 2)}.{rng.choice(['png', 'gif', 'jpg', 'svg'])}"
        elif rng.random() < 0.3:
            path = (path + "/" if path else "") + self._syl(1, 3)
        return self._keep("url", f"https://{host}/{path}")

    def iban(self, grouped: bool | None = None) -> str:
        rng = self.rng
        cc = rng.choice(list(_IBAN))
        alpha = {"n": "0123456789", "a": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "c": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
        bban = "".join(rng.choice(alpha[k]) for k in _IBAN[cc])
        iban = cc + _iban_check(cc, bban) + bban
        if grouped if grouped is not None else rng.random() < 0.4:
            iban = " ".join(iban[i:i + 4] for i in range(0, len(iban), 4))
        return self._keep("iban", iban)

    def phone(self, lang: str) -> str:
        rng = self.rng
        cc = {"en": "+1", "de": "+49", "fr": "+33", "es": "+34", "it": "+39", "pt": "+351", "nl": "+31", "ru": "+7", "ja": "+81",
              "zh": "+86", "ko": "+82"}[lang]
        return self._keep("phone", f"{cc} {rng.randint(10, 999)} {rng.randint(100, 9999)} {rng.randint(1000, 9999)}")

    # -- numbers ----------------------------------------------------------------------------------------
    def amount(self, lang: str) -> str:
        rng = self.rng
        big = lang in ("ja", "ko") or (lang in ("ru", "zh") and rng.random() < 0.5)
        value = rng.randint(1000, 2_000_000) if big else rng.randint(5, 9800) + (rng.randint(0, 99) / 100 if rng.random() < 0.6 else 0)
        th, dec = _SEP[lang]
        whole = f"{int(value):,}".replace(",", th)
        cents = value - int(value)
        s = whole + (f"{dec}{round(cents * 100):02d}" if cents and not big else "")
        return self._keep("amount", rng.choice(_CURRENCY[lang]).format(s))

    def date(self, lang: str) -> str:
        rng = self.rng
        y, m, d = rng.randint(2023, 2026), rng.randint(1, 12), rng.randint(1, 28)
        fmt = {"en": f"{['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'][m - 1]} {d}, {y}",
               "de": f"{d:02d}.{m:02d}.{y}", "ru": f"{d:02d}.{m:02d}.{y}", "fr": f"{d:02d}/{m:02d}/{y}", "es": f"{d:02d}/{m:02d}/{y}",
               "it": f"{d:02d}/{m:02d}/{y}", "pt": f"{d:02d}/{m:02d}/{y}", "nl": f"{d:02d}-{m:02d}-{y}", "ja": f"{y}年{m}月{d}日",
               "zh": f"{y}年{m}月{d}日", "ko": f"{y}년 {m}월 {d}일"}[lang]
        return self._keep("date", fmt if rng.random() < 0.8 else f"{y}-{m:02d}-{d:02d}")

    def time(self) -> str:
        return self._keep("time", f"{self.rng.randint(7, 19)}:{self.rng.choice(['00', '15', '30', '45'])}")

    def code(self) -> str:
        rng = self.rng
        return self._keep("code", rng.choice([f"INV-{rng.randint(2023, 2026)}-{rng.randint(1, 9999):04d}", f"#{rng.randint(10000, 999999)}",
                                              f"{rng.choice(['PO', 'ORD', 'TCK', 'REF'])}{rng.randint(100000, 9999999)}"]))

    def number(self, lo: int = 2, hi: int = 40) -> str:
        return self._keep("number", str(self.rng.randint(lo, hi)))

    def fill(self, template: str, lang: str, **given: str) -> str:
        """`template` formatted with `given` and, for any other {name}, {email}, {amount}…, a fresh identifier
        (each placeholder drawn anew)."""
        makers = {"name": lambda: self.name(lang), "first": lambda: self.first(lang), "email": lambda: self.email(lang),
                  "url": self.url, "image": lambda: self.url("image"), "iban": self.iban, "amount": lambda: self.amount(lang),
                  "date": lambda: self.date(lang), "time": self.time, "city": lambda: self.city(lang),
                  "company": lambda: self.company(lang), "hotel": lambda: self.hotel(lang), "code": self.code,
                  "phone": lambda: self.phone(lang), "n": self.number, "domain": self.domain}
        return template.format_map(_Lazy(given, makers))


class _Lazy(dict):
    def __init__(self, given: dict, makers: dict):
        super().__init__(given)
        self.makers = makers

    def __missing__(self, key: str) -> str:
        return self.makers[key]()
