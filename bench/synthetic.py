"""Synthetic memories for the speed benchmark: realistic texts and clustered 384-dim unit vectors.

Texts read like what the extraction step stores (one to four sentences, 40-500 characters, names, places,
dates). Vectors are not made by the model (embedding 100k texts takes ~20 minutes on 2 cores): each memory
gets ``normalise(topic centroid + theme centroid + noise)``, so a query drawn near one topic has a real,
uneven neighbourhood to find instead of uniformly random distances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DIM = 384

NAMES = (
    "Dana", "Priya", "Tom", "Hannah", "Lukas", "Mei", "Omar", "Sofia", "Jonas", "Aisha", "Marco", "Elena",
    "Kenji", "Fatima", "Noah", "Ines", "Pavel", "Grace", "Tariq", "Julia",
)  # fmt: skip
PLACES = (
    "Lisbon", "Porto", "Berlin", "Rotterdam", "Lyon", "Krakow", "Vienna", "Oslo", "Seville", "Ghent", "Turin",
    "Edinburgh", "Dublin", "Zurich", "Bologna", "Tallinn",
)  # fmt: skip
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October")
PROJECTS = ("Alpha", "Borealis", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Harbor", "Ion", "Juniper")

# Each topic: sentence templates (slots: {name} {place} {month} {day} {project} {n}) and query templates.
TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "travel": (
        ("Booked a flight to {place} on {day} {month}, window seat, returning the following Tuesday.",
         "Prefers aisle seats on flights longer than three hours and always checks in online.",
         "The hotel in {place} was too noisy; next time ask for a room facing the courtyard.",
         "Train to {place} leaves at 07:{n} from the central station; {name} has the tickets."),
        ("when is my flight to {place}", "which seat do I like on long flights", "hotel room preference"),
    ),
    "work": (
        ("Project {project} deadline is {day} {month}; {name} owns the integration tests.",
         "Weekly sync with {name} moved to Thursdays at 10:00 because of the new sprint rhythm.",
         "Agreed with {name} to split the {project} migration into three smaller releases.",
         "The quarterly budget review for {project} needs the cost breakdown by {day} {month}."),
        ("deadline for project {project}", "when is the weekly sync with {name}", "what did we decide on {project}"),
    ),
    "family": (
        ("Sister {name} lives in {place} and has two kids, the younger one starts school in {month}.",
         "Mother's birthday is on {day} {month}; she likes orchids and dark chocolate.",
         "Visiting {name} in {place} over the long weekend, bringing the board games.",
         "Dad is recovering well after the knee surgery, physiotherapy twice a week until {month}."),
        ("where does my sister live", "what to get mum for her birthday", "how is dad doing after surgery"),
    ),
    "food": (
        ("Vegetarian since {month}, still eats eggs and cheese but no fish.",
         "Allergic to peanuts; restaurants must be told when booking.",
         "Favourite restaurant in {place} is the small Basque place near the market, ask for {name}.",
         "Trying to cut down on coffee: one cup before noon, then green tea."),
        ("dietary restrictions", "favourite restaurant in {place}", "how much coffee do I drink"),
    ),
    "health": (
        ("Dentist appointment on {day} {month} at 09:{n}, the clinic moved to the new building.",
         "Running three times a week, training for the {place} half marathon in {month}.",
         "Physiotherapist {name} recommended stretching the left calf every morning.",
         "Sleeping badly since the move; trying no screens after 22:00."),
        ("when is the dentist", "which race am I training for", "advice from the physiotherapist"),
    ),
    "finance": (
        ("Tax return is due on {day} {month}; the accountant {name} needs the rental income statement.",
         "Switched the savings account to the bank with 3.{n}% interest.",
         "Monthly budget: rent 1,{n}00, groceries around 450, the rest split between savings and travel.",
         "Insurance renewal for the car comes up in {month}; compare at least three offers."),
        ("when is the tax return due", "interest on my savings", "car insurance renewal"),
    ),
    "home": (
        ("The plumber {name} comes on {day} {month} between 8 and 12 to fix the kitchen tap.",
         "Wi-Fi password is on the router sticker; the provider's support line is open until 20:00.",
         "Moving to a flat in {place} in {month}, third floor, no lift, so book movers with a hoist.",
         "Neighbour {name} waters the plants when away; spare key is in the blue box."),
        ("when does the plumber come", "who waters the plants", "details about the new flat in {place}"),
    ),
    "hobbies": (
        ("Learning Portuguese on Tuesday evenings with a tutor, {name}, aiming for B1 by {month}.",
         "Reads mostly crime novels; just finished the third book of the {place} trilogy.",
         "Plays five-a-side football on Sundays; the team needs a new goalkeeper.",
         "Photography walk with {name} in {place} planned for {day} {month}, bring the 35 mm lens."),
        ("what language am I learning", "what kind of books do I like", "photography walk plans"),
    ),
    "tech": (
        ("Laptop is a 14-inch with 32 GB RAM; the battery drains fast since the last update.",
         "Uses Python on Linux for the data pipeline; deploys with Docker on the {project} cluster.",
         "Password manager vault shared with {name} for the household accounts.",
         "Phone screen cracked on {day} {month}; repair shop in {place} quoted 140 euros."),
        ("what laptop do I have", "how do I deploy the pipeline", "phone repair quote"),
    ),
    "social": (
        ("{name}'s wedding is on {day} {month} in {place}; dress code is summer formal.",
         "Book club meets the first Friday of the month at {name}'s place.",
         "Promised to help {name} move house on the {day}th, bring the van.",
         "Dinner with old university friends in {place} postponed to {month}."),
        ("when is {name}'s wedding", "when does the book club meet", "who am I helping to move"),
    ),
}  # fmt: skip
ELABORATIONS = (
    "{name} mentioned it again in the last email.",
    "Confirmed by email on {day} {month}.",
    "This came up while planning the {month} schedule.",
    "Keep this in mind when suggesting dates.",
    "It was discussed in the thread about {project}.",
    "Worth a reminder a week before.",
    "No change since the last time this came up in {place}.",
    "The details are in the attachment {name} sent.",
)


@dataclass(frozen=True)
class SyntheticMemory:
    """One generated memory: its text, its topic and theme (the clusters its vector is drawn from)."""

    text: str
    topic: int
    theme: int


class Generator:
    """Deterministic texts and clustered vectors from one seed."""

    def __init__(self, seed: int, dim: int = DIM, themes_per_topic: int = 8) -> None:
        self.rng = np.random.default_rng(seed)
        self.dim = dim
        self.topic_names = list(TOPICS)
        self.themes_per_topic = themes_per_topic
        self.topic_centroids = self._unit(self.rng.standard_normal((len(TOPICS), dim)))
        self.theme_centroids = self._unit(self.rng.standard_normal((len(TOPICS) * themes_per_topic, dim)))

    @staticmethod
    def _unit(vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def _fill(self, template: str) -> str:
        rng = self.rng
        return template.format(
            name=NAMES[rng.integers(len(NAMES))], place=PLACES[rng.integers(len(PLACES))],
            month=MONTHS[rng.integers(len(MONTHS))], day=int(rng.integers(1, 29)),
            project=PROJECTS[rng.integers(len(PROJECTS))], n=f"{int(rng.integers(0, 60)):02d}",
        )  # fmt: skip

    def memories(self, count: int) -> list[SyntheticMemory]:
        """``count`` memories: one topic sentence plus 0-3 elaborations (about 60-400 characters)."""
        out = []
        topic_ids = self.rng.integers(len(TOPICS), size=count)
        extra = self.rng.choice(4, size=count, p=(0.45, 0.3, 0.17, 0.08))
        for topic, n_extra in zip(topic_ids, extra, strict=True):
            templates = TOPICS[self.topic_names[topic]][0]
            parts = [self._fill(templates[self.rng.integers(len(templates))])]
            parts += [self._fill(ELABORATIONS[self.rng.integers(len(ELABORATIONS))]) for _ in range(n_extra)]
            theme = int(topic) * self.themes_per_topic + int(self.rng.integers(self.themes_per_topic))
            out.append(SyntheticMemory(" ".join(parts), int(topic), theme))
        return out

    def vectors(self, items: Sequence[SyntheticMemory], noise: float = 0.9) -> np.ndarray:
        """Unit vectors near each item's topic and theme centroids (float32, shape (n, dim))."""
        topics = np.fromiter((m.topic for m in items), dtype=np.int64, count=len(items))
        themes = np.fromiter((m.theme for m in items), dtype=np.int64, count=len(items))
        noise_part = self.rng.standard_normal((len(items), self.dim)).astype(np.float32) / np.sqrt(self.dim)
        raw = self.topic_centroids[topics] + 0.7 * self.theme_centroids[themes] + noise * 1.2 * noise_part
        return self._unit(raw)

    def queries(self, count: int) -> tuple[list[str], np.ndarray]:
        """``count`` short query texts and their vectors (near a random topic and theme)."""
        items = []
        for _ in range(count):
            topic = int(self.rng.integers(len(TOPICS)))
            templates = TOPICS[self.topic_names[topic]][1]
            text = self._fill(templates[self.rng.integers(len(templates))])
            theme = topic * self.themes_per_topic + int(self.rng.integers(self.themes_per_topic))
            items.append(SyntheticMemory(text, topic, theme))
        return [m.text for m in items], self.vectors(items)
