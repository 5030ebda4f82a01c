"""A second retrieval data set, of another style: long casual chats between two friends across many sessions.

Written apart from ``bench.conversations``/``bench.phrases`` (its templates were written without reading
theirs) so that a ranking tuned on one set is judged on the other. Every turn is one memory, as a chat log
would be stored: ``Maya: guess what, we brought home a rescue greyhound``. Each conversation is one user of
the store (both speakers' turns are that user's memories), ~350 turns over 28 sessions a year apart.

Questions are asked about the speakers in the third person, by someone who did not read the chat, in other
words than the turns, in four kinds:

- ``single``: one turn answers it (``What is the name of Maya's new dog?``);
- ``multi_hop``: two turns from different sessions together (the dog was named in one, what it chewed in
  another: ``What did the animal Maya adopted ruin?``);
- ``temporal``: when something happened; the answer is the turn that tells it (its session date is in the text);
- ``open``: what a person would like or do, inferred from a turn about their habits (``What present would suit
  Maya?`` from a turn about her birding trips).

Distractors: both friends live similar lives (the other one's pet, trip, injury with other values); replies
repeat the names and topics of the turn before; most turns are small talk. Each template slot has several
wordings, so the vocabulary varies between conversations. Fixed seed (``SEED``), no downloads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench.conversations import Dataset, Message, Question

SEED = 14
START = datetime(2025, 2, 3, 18, 0, tzinfo=UTC)
SESSIONS = 28

NAMES = ("Maya", "Tomas", "Priya", "Jonah", "Ines", "Kofi", "Lena", "Arturo", "Yuki", "Dmitri", "Sade", "Callum")
PEOPLE = ("Rosa", "Felix", "Hana", "Omar", "Bea", "Luca", "Nadia", "Ezra", "Wren", "Idris", "Marta", "Otto")
SISTERS = ("Rosa", "Hana", "Bea", "Nadia", "Wren", "Marta", "Ottilie", "Greta")
PET_KINDS = ("greyhound", "beagle", "tabby kitten", "border collie", "ginger cat", "lop-eared rabbit", "corgi")
PET_NAMES = ("Biscuit", "Pickle", "Mango", "Juniper", "Waffles", "Pepper", "Noodle", "Clementine", "Ziggy")
CHEWED = ("my new hiking boots", "the sofa cushions", "a library book", "the TV remote", "my passport holder")
CITIES = ("Lisbon", "Krakow", "Valencia", "Ghent", "Porto", "Tallinn", "Bologna", "Edinburgh", "Ljubljana")
COUNTRIES = ("Japan", "Peru", "Iceland", "Vietnam", "Morocco", "New Zealand", "Norway", "Mexico")
EMPLOYERS = ("a solar panel startup", "the city museum", "a children's hospital", "a logistics firm",
             "an architecture studio", "the regional newspaper", "a vet clinic")  # fmt: skip
ROLES = ("a data analyst", "an exhibition designer", "a night-shift nurse", "a copy editor", "a project coordinator")
INSTRUMENTS = ("cello", "ukulele", "drums", "saxophone", "piano", "banjo")
ALLERGENS = ("shellfish", "peanuts", "sesame", "kiwi fruit", "penicillin")
RACES = ("half marathon", "10k trail run", "sprint triathlon", "charity bike ride", "open-water swim")
INJURIES = ("ankle", "wrist", "shoulder", "knee")
SPORTS = ("five-a-side football", "bouldering", "netball", "skiing", "padel")
BOOKS = ("The Salt Road", "A Winter of Owls", "Glass Harbour", "The Quiet Engineer", "Paper Lanterns")
CAUSES = ("the food bank", "an animal shelter", "a literacy charity", "the community garden", "a hospice shop")
HOBBIES = (
    ("birds", "I spend every free weekend in the marshes with my binoculars, ticking off waders and warblers",
     ("What present would suit {A}?", "What might {A} enjoy doing on a nature reserve?")),
    ("pottery", "Most evenings I'm at the wheel in the shared studio, throwing bowls that come out lopsided",
     ("What kind of class would {A} love as a gift?", "Which craft does {A} practise?")),
    ("astronomy", "Clear night forecast, so the telescope is coming out again, hoping to catch Saturn's rings",
     ("What would {A} do on a cloudless night?", "Which science hobby does {A} have?")),
    ("baking", "Sourdough attempt number eleven, the starter finally bubbled and the crumb looks proper",
     ("What might {A} bring to a party?", "What does {A} make in the kitchen at weekends?")),
    ("climbing", "Spent three hours at the wall again, my forearms are completely fried",
     ("What sort of trip would {A} pick for an active holiday?", "Which indoor sport keeps {A} busy?")),
)  # fmt: skip

OPENERS = (
    "Hey {B}! It's been ages, how are things?", "Hi hi, finally a quiet evening to catch up", "Morning {B}!",
    "Sorry I went silent, this week was a blur", "Oh good, you're online", "Long time no chat!",
    "Evening! Got a minute?", "{B}!! I have news", "How was your weekend?", "Hey, you free to talk for a bit?",
)  # fmt: skip
FILLER = (
    "Ha, that's so you", "No way, seriously?", "I know, right?", "Honestly same", "That sounds exhausting",
    "Oh I love that", "Tell me everything", "Wait, back up a second", "You always find the best stuff",
    "Haha, classic", "Ugh, mondays", "Fingers crossed for you", "That's brilliant news", "Mood",
    "I'd have done exactly the same", "Can't argue with that", "Oh that's rough, sorry", "Good for you honestly",
    "Did you ever sort out the boiler thing?", "The weather here has been grim all week",
    "I've been binge-watching a baking show, it's terrible and I can't stop",
    "My neighbour started renovating, the drilling starts at 7am sharp",
    "Work is fine, just a lot of meetings that could have been emails",
    "I tried that new ramen place, overpriced but the broth was good",
    "Still haven't unpacked the boxes from the spring clear-out",
    "My phone screen cracked again, third time this year",
    "We should do a video call soon, typing is slow",
    "I'm so tired, the train was cancelled and I walked home",
    "Mum keeps sending me recipes she'll never cook",
    "Went to a friend's birthday, karaoke until two, regrets",
    "Did you see the match on Sunday? Painful",
    "I've started going to bed at ten, I feel like a new person",
    "The cafe downstairs changed owners, the coffee is worse",
    "Anyway enough about me", "Talk soon!", "Gotta run, dinner's ready", "Night night", "Speak tomorrow?",
    "Send pics!", "Miss you, let's meet up properly", "OK I'll let you go, bye!",
)  # fmt: skip
# Near misses: the topic words of the facts, about nobody in the questions.
NEAR_MISSES = (
    "My cousin's {pet_kind} escaped over the fence again, the whole street was out looking",
    "A colleague just came back from {country}, showed me about four hundred photos",
    "Someone at work is allergic to {allergen} so the office party menu was a whole saga",
    "A {race} is going past our flat on Sunday, roads closed all morning",
    "Saw a busker playing the {instrument} at the station, really good actually",
    "The library has a waiting list for {book}, apparently everyone's reading it",
    "My landlord's nephew hurt his {injury} at {sport}, now he can't fix anything",
    "They're hiring at {employer}, a friend of a friend applied",
    "Heard {city} is lovely in autumn, might be a future trip",
    "Our street is collecting for {cause} this month",
)  # fmt: skip
REACTIONS = (
    "Oh wow, {echo}? That's huge", "Wait, {echo}! How did I not know this", "Ahh {echo}, I'm so happy for you",
    "{echo}, really? Tell me more", "Haha of course, {echo}", "Hold on, {echo}... when did this happen?",
)  # fmt: skip


@dataclass(frozen=True)
class Fact:
    """One fact a speaker tells: its wordings, the short echo a friend replies with, and its questions.

    ``questions``: (kind, wordings) pairs; the answer is this fact's turn. Wordings use ``{A}`` for the speaker
    and the fact's own slots.
    """

    name: str
    tells: tuple[str, ...]
    echo: str
    questions: tuple[tuple[str, tuple[str, ...]], ...]


FACTS = (
    Fact("pet", (
        "Guess what, we finally brought home a {pet_kind} from the rescue centre, we're calling her {pet}!",
        "There's a new member of the household: a little {pet_kind} called {pet}",
        "So I caved and adopted a {pet_kind}. {pet} already owns the sofa",
    ), "a {pet_kind}", (
        ("single", ("What is the name of the animal {A} took in?", "What did {A} call the new four-legged friend?")),
        ("temporal", ("When did {A} get a pet?", "At what point did {A}'s household gain an animal?")),
    )),
    Fact("job", (
        "Big news, I got the offer! Starting at {employer} as {role} next month",
        "I handed in my notice today. The new gig: {role} at {employer}",
        "First week as {role} done, {employer} is chaos but I like it",
    ), "{employer}", (
        ("single", ("Who hired {A}, and for what position?", "Which organisation does {A} work for these days?")),
        ("temporal", ("When did {A} switch careers?", "When was {A} offered the new position?")),
    )),
    Fact("sibling", (
        "My sister {sib} just relocated to {city} for a lecturing post, I'm so jealous",
        "{sib}, my little sister, has moved to {city}! She found a flat near the river",
    ), "{city}", (
        ("single", ("Where did {A}'s sister move to?", "In which town is {A}'s sibling living now?")),
    )),
    Fact("instrument", (
        "I've signed up for {instrument} lessons on Thursday evenings, my fingers hurt already",
        "Practised the {instrument} for an hour tonight, the neighbours must hate me",
    ), "the {instrument}", (
        ("single", ("Which instrument is {A} learning to play?", "What music lessons is {A} taking?")),
        ("temporal", ("When did {A} begin music lessons?",)),
    )),
    Fact("allergy", (
        "The doctor's results came back: I'm allergic to {allergen}. That explains a lot",
        "Had a proper reaction at lunch, turns out {allergen} is off the menu for me forever",
    ), "{allergen}", (
        ("single", ("What does {A} have to avoid eating?", "What did the tests reveal {A} reacts badly to?")),
        ("temporal", ("When did {A} find out about the allergy?",)),
    )),
    Fact("race", (
        "I did it, crossed the line of the {race} in {race_city}! My legs are jelly",
        "Finished the {race} this morning in {race_city}, not fast but I didn't stop once",
    ), "the {race}", (
        ("single", ("What endurance event did {A} complete?", "Which sporting challenge did {A} finish?")),
        ("temporal", ("When did {A} take part in the {race}?", "On which weekend did {A} compete?")),
    )),
    Fact("injury", (
        "Ugh, I twisted my {injury} at {sport} last night, now I'm hobbling around",
        "Physio says my {injury} needs six weeks, all because of one bad landing at {sport}",
    ), "your {injury}", (
        ("single", ("How did {A} get hurt?", "Which part of {A}'s body was injured, and doing what?")),
        ("temporal", ("When did {A} pick up the injury?",)),
    )),
    Fact("trip", (
        "Booked it! Two weeks in {country} in the autumn, I can't stop looking at the itinerary",
        "Flights to {country} are confirmed, we leave on the ninth",
    ), "{country}", (
        ("single", ("Which country is {A} travelling to?", "Where is {A} going on holiday abroad?")),
        ("temporal", ("When did {A} book the big holiday?",)),
    )),
    Fact("book", (
        "Just finished {book} and I'm a wreck, that ending!",
        "Couldn't put down {book}, stayed up till 3am reading",
    ), "{book}", (
        ("single", ("Which novel kept {A} up all night?", "What was the last story {A} read and loved?")),
    )),
    Fact("volunteer", (
        "I've started helping out at {cause} on Saturday mornings, it's really grounding",
        "Every Saturday now I'm at {cause}, sorting donations and chatting with the regulars",
    ), "{cause}", (
        ("single", ("Where does {A} give up time for free?", "What charity work does {A} do at weekends?")),
    )),
)  # fmt: skip

# Two-step facts: step 1 introduces an entity (a name), step 2 says something about it by name only.
CHAINS = (
    (
        ("pet",),
        (
            "Disaster: {pet} chewed up {chewed} while I was at work",
            "Came home to find {chewed} in pieces. {pet} looked very proud of herself",
        ),
        (
            "What did the {pet_kind} {A} adopted ruin?",
            "Which of {A}'s belongings got destroyed by the rescued animal?",
        ),
    ),
    (
        ("sibling",),
        (
            "Spent the weekend at {sib}'s place, she showed me every bakery in town",
            "Just back from visiting {sib}, the old town there is gorgeous",
        ),
        ("Which city did {A} travel to when visiting family?", "Where did {A} go for the weekend with a relative?"),
    ),
    (
        ("job",),
        (
            "My manager {boss} wants me to lead the {project} rollout, terrifying",
            "{boss} put me in charge of the {project}, no pressure then",
        ),
        ("What did {A}'s boss at the new workplace give them to run?", "Which project is {A} leading at work?"),
    ),
)
Turn = tuple[str, str, str]  # (key, speaker, text)
PROJECTS = ("spring fundraiser", "new booking system", "archive digitisation", "rota overhaul", "website relaunch")


class _Conversation:
    """One long chat between two friends, and the questions about it."""

    def __init__(self, number: int, rng: random.Random) -> None:
        self.rng = rng
        self.user = f"chat{number + 1}@example.org"
        self.prefix = f"c{number + 1}"
        self.speakers = tuple(rng.sample(NAMES, 2))
        self.sessions: list[list[list[Turn]]] = [[] for _ in range(SESSIONS)]  # blocks of turns kept together
        self.questions: list[tuple[str, str, tuple[str, ...]]] = []
        self.keys = 0
        self.slots = {speaker: self._slots() for speaker in self.speakers}
        # Both friends lead similar lives, but never with the same values: the other's facts are distractors.
        for slot in ("pet_kind", "pet", "city", "country", "allergen", "instrument", "race", "injury", "book"):
            first, second = self.speakers
            while self.slots[second][slot] == self.slots[first][slot]:
                self.slots[second][slot] = self._slots()[slot]

    def _slots(self) -> dict[str, str]:
        pick = self.rng.choice
        return {
            "pet_kind": pick(PET_KINDS), "pet": pick(PET_NAMES), "chewed": pick(CHEWED), "city": pick(CITIES),
            "race_city": pick(CITIES), "country": pick(COUNTRIES), "employer": pick(EMPLOYERS), "role": pick(ROLES),
            "instrument": pick(INSTRUMENTS), "allergen": pick(ALLERGENS), "race": pick(RACES),
            "injury": pick(INJURIES), "sport": pick(SPORTS), "book": pick(BOOKS), "cause": pick(CAUSES),
            "sib": pick(SISTERS), "boss": pick(PEOPLE), "project": pick(PROJECTS),
        }  # fmt: skip

    def key(self) -> str:
        self.keys += 1
        return f"k{self.keys}"

    def say(self, session: int, speaker: str, text: str, *, reply: str | None = None) -> str:
        """Append a turn (followed by the friend's reaction, when given) to a session; returns the turn's key."""
        key = self.key()
        block = [(key, speaker, text)]
        if reply is not None:
            block.append((self.key(), self.other(speaker), reply))
        self.sessions[session].append(block)
        return key

    def other(self, speaker: str) -> str:
        return self.speakers[1] if speaker == self.speakers[0] else self.speakers[0]

    def tell(self, speaker: str) -> None:
        """Each fact told once by each speaker (in a random session), its questions asked about ``speaker``."""
        slots = self.slots[speaker]
        told: dict[str, tuple[int, str]] = {}
        for fact in self.rng.sample(FACTS, len(FACTS)):
            session = self.rng.randrange(SESSIONS - 6)
            text = self.rng.choice(fact.tells).format(**slots)
            echo = fact.echo.format(**slots)
            reply = self.rng.choice(REACTIONS).format(echo=echo)
            key = self.say(session, speaker, text, reply=reply[0].upper() + reply[1:])
            told[fact.name] = (session, key)
            for kind, wordings in fact.questions:
                self.ask(kind, self.rng.choice(wordings), speaker, (key,))
        for (needs,), steps, wordings in CHAINS:
            first_session, first_key = told[needs]
            session = self.rng.randrange(first_session + 2, SESSIONS)
            key = self.say(session, speaker, self.rng.choice(steps).format(**slots))
            self.ask("multi_hop", self.rng.choice(wordings), speaker, (first_key, key))
        hobby, text, wordings = self.rng.choice(HOBBIES)
        key = self.say(self.rng.randrange(SESSIONS), speaker, text)
        self.ask("open", self.rng.choice(wordings), speaker, (key,))
        del hobby

    def ask(self, kind: str, wording: str, speaker: str, answers: tuple[str, ...]) -> None:
        self.questions.append((kind, wording.format(A=speaker, **self.slots[speaker]), answers))

    def pad(self, turns_per_session: tuple[int, int]) -> None:
        """Small talk and near misses around the facts: each session opens with a greeting and runs 8-16 turns."""
        for blocks in self.sessions:
            target = self.rng.randint(*turns_per_session)
            first = self.rng.choice(self.speakers)
            blocks.insert(0, [(self.key(), first, self.rng.choice(OPENERS).format(B=self.other(first)))])
            while sum(len(block) for block in blocks) < target:
                speaker = self.rng.choice(self.speakers)
                if self.rng.random() < 0.15:
                    text = self.rng.choice(NEAR_MISSES).format(**self._slots())
                else:
                    text = self.rng.choice(FILLER)
                blocks.insert(self.rng.randint(1, len(blocks)), [(self.key(), speaker, text)])

    def messages(self) -> tuple[list[Message], list[Question]]:
        """Turns numbered in order, sessions 4-21 days apart, turns a minute or two apart."""
        at = START + timedelta(days=self.rng.randint(0, 60))
        out: list[Message] = []
        ids: dict[str, str] = {}
        for number, blocks in enumerate(self.sessions):
            at += timedelta(days=self.rng.randint(4, 21))
            moment = at
            for key, speaker, text in (turn for block in blocks for turn in block):
                mid = f"{self.prefix}-t{len(out):04d}"
                ids[key] = mid
                out.append(Message(mid, self.user, f"{self.prefix}-s{number:02d}", moment, f"{speaker}: {text}"))
                moment += timedelta(minutes=self.rng.randint(1, 3))
        questions = [
            Question(f"{self.prefix}-q{i:02d}", self.user, kind, text, tuple(ids[k] for k in keys))
            for i, (kind, text, keys) in enumerate(self.questions)
        ]
        return out, questions


def generate(conversations: int = 6, seed: int = SEED, turns_per_session: tuple[int, int] = (8, 16)) -> Dataset:
    """``conversations`` chats (~350 turns each at the default size) and their questions."""
    rng = random.Random(seed)
    data = Dataset()
    for number in range(conversations):
        chat = _Conversation(number, random.Random(rng.random()))
        for speaker in chat.speakers:
            chat.tell(speaker)
        chat.pad(turns_per_session)
        messages, questions = chat.messages()
        data.messages += messages
        data.questions += questions
    return data
