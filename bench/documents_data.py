"""Generated documents for bench/documents.py: files of every format Quinn reads, and site handbooks with planted
facts and the questions that ask for them. Deterministic from one seed; no downloads.

The handbooks are what a knowledge base holds: one per site (an office, a depot, a lab), each of a few pages on
the same topics (network access, the gate, parking, the fire drill, ...). Each site's handbook plants a fact on
some of the topics, with a value of its own ("its passphrase is amber-otter-41"); the fact's sentence does not
name the site, only the page heading does on about half the pages and the title page always does, so a
question ("What is the wifi password at the Northgate depot?") has to find the right site's page among forty
pages on the same topic. Questions are worded apart from the fact ("password" for "passphrase"). Sites are
split in two halves by the seed: ``dev`` (looked at while the benchmark was written) and ``test`` (reported).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from email.message import EmailMessage
from io import BytesIO
from typing import Any

import numpy as np

from tests.lab.documents import make_docx, make_odt, make_pdf, make_pptx, make_xlsx

SEED = 1818
PLACES = ("Northgate", "Harbour Street", "Elm Park", "Kingsway", "Riverside", "Castle Hill", "Millbrook",
          "Southbank", "Westfield", "Ashford Road", "Queens Quay", "Foundry Lane", "Larkspur", "Old Mill",
          "Station Square", "Bramley", "Hawthorn", "Copper Beech", "Marsh Lane", "Greyfriars")  # fmt: skip
SITES = ("depot", "office", "laboratory", "studio", "warehouse", "clinic")
FIRST = ("Priya", "Tomasz", "Aisha", "Fergus", "Mei", "Oluwaseun", "Ines", "Dmitri", "Saoirse", "Kwame",
         "Lucia", "Henrik", "Yara", "Bastian", "Noor", "Callum")  # fmt: skip
LAST = ("Okafor", "Lindqvist", "Haddad", "McBride", "Tanaka", "Moreau", "Kowalczyk", "Adeyemi", "Fischer",
        "Castellanos", "Nakamura", "Oyelaran", "Petrov", "Svensson", "Mensah", "Duarte")  # fmt: skip
WORDS = ("amber", "otter", "cobalt", "willow", "juniper", "falcon", "maple", "quartz", "saffron", "tundra",
         "harbor", "pepper", "violet", "badger", "cedar", "ember", "lagoon", "nimbus", "orchid", "pebble")  # fmt: skip
SPOTS = ("the oak tree beside the bus stop", "the far end of the staff car park", "the bandstand in the park opposite",
         "the lamp post at the corner of the loading yard", "the bicycle shelter by the north fence",
         "the green gate of the church hall next door", "the flagpole in front of reception",
         "the picnic benches behind the canteen")  # fmt: skip
WHERE = ("next to the lift on the third floor", "behind the reception desk", "in the corridor outside room 12",
         "beside the kitchen door on the ground floor", "at the top of the main staircase",
         "on the wall of the meeting room called Atlas")  # fmt: skip
GENERAL = ("This page is reviewed by the site committee every six months and after any incident.",
           "Where this handbook and a manager's instruction differ, follow the manager and tell the committee.",
           "Contractors working on site are expected to read this page before their first visit.",
           "Suggestions for improving these arrangements are welcome at the monthly staff meeting.",
           "Temporary changes are announced by email and on the notice board near the entrance.",
           "Older versions of this page are kept in the shared drive for reference only.",
           "Anyone who is unsure what to do should ask a colleague rather than guess.",
           "The arrangements described here apply on weekdays; weekend work needs written approval.",
           "Accessibility needs can be discussed in confidence with the people team.",
           "Please keep this handbook up to date by reporting anything that has changed.")  # fmt: skip


@dataclass(frozen=True)
class Topic:
    """One page topic of a handbook: its heading, a fact planted on it (a sentence with ``{value}``), the
    questions that ask for it (``{site}``), and sentences about the topic that carry no fact."""

    name: str
    heading: str
    fact: str
    questions: tuple[str, ...]
    filler: tuple[str, ...]


TOPICS = (
    Topic("wifi", "Network access", "The guest wireless network is called {extra} and its passphrase is {value}.",
          ("What is the wifi password at the {site}?", "How do I get my laptop online at the {site}, what's the key?"),
          ("Staff laptops join the internal network automatically once they are registered with IT.",
           "Please do not share network credentials with contractors; they receive their own accounts.",
           "Printers on each floor can be reached from the internal network only.",
           "Report any network outage to the service desk with the time it started.")),
    Topic("gate", "Vehicle access", "Vehicles enter through the side gate, which opens with keypad code {value}.",
          ("Which code opens the car gate at the {site}?", "I'm driving to the {site}; what do I type to get in?"),
          ("The main gate is closed outside working hours and on public holidays.",
           "Lorries longer than twelve metres must book a slot before arriving.",
           "Drive at walking pace inside the grounds and give way to pedestrians.",
           "The barrier may take a few seconds to respond in cold weather.")),
    Topic("parking", "Parking", "Visitors may leave their cars in {value} of the basement car park.",
          ("Where can a guest park at the {site}?", "Which parking space should my visitor use at the {site}?"),
          ("Electric vehicle chargers are available on a first come, first served basis.",
           "Motorcycles use the marked area near the ramp.",
           "Permits for staff parking are renewed every January.",
           "The car park is patrolled and covered by cameras.")),
    Topic("assembly", "Fire safety", "When the fire alarm sounds, everyone leaves the building and gathers at {value}.",
          ("Where do we meet if there is a fire evacuation at the {site}?",
           "What is the assembly point at the {site} when the alarm goes off?"),
          ("Fire doors must never be wedged open.", "The alarm is tested every Wednesday at eleven.",
           "Fire wardens wear yellow vests during a drill.", "Do not use the lifts during an evacuation.")),
    Topic("deliveries", "Deliveries", "Goods are received at the loading bay only {value} on weekdays.",
          ("When are deliveries accepted at the {site}?", "What hours can a courier drop parcels at the {site}?"),
          ("Couriers must sign the delivery book and show identification.",
           "Hazardous materials need a data sheet attached to the consignment.",
           "Pallets are moved to storage within one working day.",
           "Damaged goods are photographed before the driver leaves.")),
    Topic("manager", "Who is who", "Day-to-day running of the premises is the responsibility of {value}.",
          ("Who is in charge of the {site}?", "Who manages the {site} day to day?"),
          ("The finance team sits on the second floor and handles all purchase orders.",
           "New starters are given a buddy for their first month.",
           "Questions about payroll go to the people team by email.",
           "The organisation chart is updated every quarter.")),
    Topic("alarm", "Security", "To disarm the intruder alarm, enter {value} on the panel beside the main door.",
          ("What is the burglar alarm code for the {site}?", "How do I switch off the security alarm at the {site}?"),
          ("The last person to leave checks that every window is closed.",
           "Lost keys must be reported to facilities on the same day.",
           "Visitors are accompanied at all times in secure areas.",
           "Security cameras record the entrances around the clock.")),
    Topic("canteen", "Food and drink", "The canteen serves hot meals {value}.",
          ("When can I get lunch at the {site}?", "What time is hot food available at the {site}?"),
          ("Fresh fruit is free for staff every morning.", "Please label food you keep in the shared fridge.",
           "Vegetarian and vegan options are offered every day.", "The coffee machine is descaled on Fridays.")),
    Topic("serverkey", "Server room", "The only spare key to the server room is kept by {value}.",
          ("Who has the spare key to the server room at the {site}?",
           "I need to get into the server room at the {site}; who holds the key?"),
          ("The server room is kept at nineteen degrees and must stay closed.",
           "Only named staff may enter the server room unaccompanied.",
           "Equipment changes in the server room are logged in the change register.",
           "Cables are labelled at both ends before anything is unplugged.")),
    Topic("firstaid", "First aid", "The first-aid kit and the defibrillator hang {value}.",
          ("Where is the defibrillator at the {site}?", "Where can I find a first aid kit at the {site}?"),
          ("Every floor has at least two trained first aiders.", "Accidents are written in the accident book.",
           "Eye wash stations are checked monthly.", "Call the emergency services first in a serious case.")),
)  # fmt: skip


@dataclass(frozen=True)
class Fact:
    """A planted fact: where it is (site, file, page) and its sentence, exactly as it appears in the file."""

    site: str
    topic: str
    sentence: str
    file: str
    split: str  # "dev" or "test"


@dataclass(frozen=True)
class Question:
    """A question about one planted fact."""

    text: str
    fact: Fact


@dataclass
class Corpus:
    """The handbooks (name -> bytes), their facts and the questions about them."""

    files: dict[str, bytes] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def _value(topic: str, rng: np.random.Generator) -> tuple[str, str]:
    """(value, extra) of a planted fact on ``topic``: different on every site."""
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    if topic == "wifi":
        return f"{pick(WORDS)}-{pick(WORDS)}-{int(rng.integers(10, 99))}", f"{pick(WORDS).title()}Guest"
    if topic in ("gate", "alarm"):
        code = str(int(rng.integers(1000, 9999)))
        return (code + "#" if topic == "gate" else f"{code}*{int(rng.integers(10, 99))}"), ""
    if topic == "parking":
        return f"bay {int(rng.integers(1, 240))} on level -{int(rng.integers(1, 4))}", ""
    if topic == "assembly":
        return pick(SPOTS), ""
    if topic == "deliveries":
        start = int(rng.integers(5, 10))
        return f"between {start:02d}:{pick(('00', '15', '30', '45'))} and {start + 3:02d}:{pick(('00', '30'))}", ""
    if topic in ("manager", "serverkey"):
        return f"{pick(FIRST)} {pick(LAST)}", ""
    if topic == "canteen":
        start = int(rng.integers(11, 13))
        return f"from {start}:{pick(('00', '15', '30', '45'))} until {start + 2}:{pick(('00', '30'))}", ""
    return pick(WHERE), ""


def _page(topic: Topic, site: str, fact: str | None, rng: np.random.Generator, named: bool) -> str:
    """A page: its heading (naming the site when ``named``), sentences about the topic, and the fact."""
    filler = [topic.filler[i] for i in rng.permutation(len(topic.filler))]
    general = [GENERAL[i] for i in rng.permutation(len(GENERAL))[: int(rng.integers(4, 9))]]
    sentences = [*filler[: int(rng.integers(3, 5))], *general]
    sentences = [sentences[i] for i in rng.permutation(len(sentences))]
    if fact is not None:
        sentences.insert(int(rng.integers(0, len(sentences) + 1)), fact)
    heading = f"{site.title()}: {topic.heading}" if named else topic.heading
    return heading + "\n" + " ".join(sentences)


HANDBOOK_FORMATS = ("pdf", "docx", "odt", "markdown", "html", "text", "pptx")


def handbook_file(kind: str, title: str, pages: list[str]) -> tuple[str, bytes]:
    """(extension, bytes) of a handbook in ``kind``: a page per PDF page or slide, a heading per page elsewhere."""
    split = [(p.split("\n", 1)[0], p.split("\n", 1)[1] if "\n" in p else "") for p in pages]
    if kind == "pdf":
        return "pdf", make_pdf([title + "\n" + pages[0], *pages[1:]])
    if kind == "pptx":
        return "pptx", make_pptx([[title, *p.split("\n")] for p in pages])
    if kind == "docx":
        return "docx", make_docx([("h1", title), *[b for h, t in split for b in (("h1", h), ("p", t))]])
    if kind == "odt":
        return "odt", make_odt([("h", title), *[b for h, t in split for b in (("h", h), ("p", _xml(t)))]])
    if kind == "markdown":
        return "md", (f"# {title}\n\n" + "".join(f"## {h}\n\n{t}\n\n" for h, t in split)).encode()
    if kind == "html":
        body = "".join(f"<h2>{h}</h2><p>{t}</p>" for h, t in split)
        return "html", f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>".encode()
    return "txt", (title + "\n\n" + "\n\n".join(pages) + "\n").encode()


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;")


def corpus(sites: int = 40, facts_per_site: int = 6, seed: int = SEED) -> Corpus:
    """``sites`` handbooks, each planting ``facts_per_site`` facts (two questions each); half the sites dev,
    half test."""
    rng = np.random.default_rng(seed)
    names = [f"{place} {kind}" for place in PLACES for kind in SITES]
    chosen = [names[i] for i in rng.choice(len(names), size=sites, replace=False)]
    test_sites = set(chosen[i] for i in rng.permutation(sites)[: sites // 2])
    out = Corpus()
    for number, site in enumerate(chosen):
        split = "test" if site in test_sites else "dev"
        planted = {int(i) for i in rng.choice(len(TOPICS), size=facts_per_site, replace=False)}
        kind = HANDBOOK_FORMATS[number % len(HANDBOOK_FORMATS)]
        title = f"The {site.title()}: site handbook"
        pages, facts = [], []
        for t in rng.permutation(len(TOPICS)):
            topic = TOPICS[int(t)]
            fact = None
            if int(t) in planted:
                value, extra = _value(topic.name, rng)
                fact = topic.fact.format(value=value, extra=extra)
                facts.append((topic, fact))
            if fact is not None or rng.random() < 0.5:  # topics without a fact on about half the sites
                pages.append(_page(topic, site, fact, rng, named=bool(rng.random() < 0.5)))
        ext, data = handbook_file(kind, title, pages)
        filename = f"{site.lower().replace(' ', '-')}-handbook.{ext}"
        out.files[filename] = data
        for topic, sentence in facts:
            fact = Fact(site, topic.name, sentence, filename, split)
            out.facts.append(fact)
            out.questions += [Question(q.format(site=site.title()), fact) for q in topic.questions]
    return out


# -- files of every format, for extraction and indexing speed -------------------------------------------------

FORMATS = ("pdf", "docx", "odt", "xlsx", "csv", "pptx", "html", "markdown", "text", "eml", "ics")
CONTENT_TYPES = {"pdf": "application/pdf", "docx": "application/vnd.openxmlformats-officedocument."
                 "wordprocessingml.document", "odt": "application/vnd.oasis.opendocument.text",
                 "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "csv": "text/csv",
                 "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                 "html": "text/html", "markdown": "text/markdown", "text": "text/plain", "eml": "message/rfc822",
                 "ics": "text/calendar"}  # fmt: skip
EXTENSIONS = {"markdown": "md", "text": "txt"}


def sample_files(kind: str, files: int, pages: int, seed: int = SEED) -> list[tuple[str, bytes, int]]:
    """``files`` files of ``kind``, each of about ``pages`` pages of text (a page: ~1,500 characters; a sheet of
    ``pages`` x 25 rows; ``pages`` x 5 calendar events): (name, bytes, pages)."""
    rng = np.random.default_rng(seed + FORMATS.index(kind))
    out = []
    for n in range(files):
        site = f"{PLACES[int(rng.integers(len(PLACES)))]} {SITES[int(rng.integers(len(SITES)))]}"
        texts = [_page(TOPICS[int(rng.integers(len(TOPICS)))], site, None, rng, True) for _ in range(pages * 5)]
        page_texts = ["\n".join(texts[i : i + 5]) for i in range(0, len(texts), 5)]
        name = f"{kind}-{n + 1}.{EXTENSIONS.get(kind, kind)}"
        if kind in HANDBOOK_FORMATS:
            data = handbook_file(kind, f"The {site} handbook", page_texts)[1]
        elif kind in ("xlsx", "csv"):
            rows: list[list[Any]] = [["Name", "Team", "Room", "Phone", "Note"]]
            rows += [[f"{FIRST[int(rng.integers(len(FIRST)))]} {LAST[int(rng.integers(len(LAST)))]}",
                      SITES[int(rng.integers(len(SITES)))], int(rng.integers(1, 400)), f"+44 20 {i:04d} {n:04d}",
                      TOPICS[int(rng.integers(len(TOPICS)))].filler[0]] for i in range(pages * 25)]  # fmt: skip
            data = make_xlsx({"Staff": rows}) if kind == "xlsx" else _csv(rows)
        elif kind == "eml":
            data = _eml(site, page_texts)
        else:
            data = _ics(site, pages * 5, rng)
        out.append((name, data, pages))
    return out


def _csv(rows: list[list[Any]]) -> bytes:
    import csv
    from io import StringIO

    text = StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue().encode()


def _eml(site: str, pages: list[str]) -> bytes:
    message = EmailMessage()
    message["From"] = "facilities@example.org"
    message["To"] = "all-staff@example.org"
    message["Subject"] = f"Notes for the {site}"
    message["Date"] = "Mon, 02 Nov 2026 09:00:00 +0000"
    message.set_content("\n\n".join(pages))
    out = BytesIO(message.as_bytes())
    return out.getvalue()


def _ics(site: str, events: int, rng: np.random.Generator) -> bytes:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Quinn bench//EN"]
    for i in range(events):
        topic = TOPICS[int(rng.integers(len(TOPICS)))]
        day = 1 + i % 28
        lines += ["BEGIN:VEVENT", f"UID:bench-{i}@example.org", f"DTSTART:202612{day:02d}T0900{i % 60:02d}Z",
                  f"DTEND:202612{day:02d}T1000{i % 60:02d}Z", f"SUMMARY:{topic.heading} briefing at the {site}",
                  f"LOCATION:{site}, room {int(rng.integers(1, 40))}",
                  "DESCRIPTION:" + " ".join(topic.filler), "END:VEVENT"]  # fmt: skip
    return ("\r\n".join([*lines, "END:VCALENDAR"]) + "\r\n").encode()


def dump(data: Corpus) -> str:
    """The corpus's facts and questions as JSON (the files are re-made from the seed)."""
    return json.dumps({"facts": [f.__dict__ for f in data.facts],
                       "questions": [{"text": q.text, "fact": q.fact.sentence, "file": q.fact.file,
                                      "split": q.fact.split} for q in data.questions]}, indent=1)  # fmt: skip
