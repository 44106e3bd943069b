"""The generated workload of bench_scale.py: items, subscriptions, feeds.yaml.

Two workloads (``--workload``):

realistic (default)
    Items: the topical words below (Zipf-distributed), 0-3 categories, and a few
    mentions of named entities from a long tail of 30,000 synthetic names
    (``scale_names``: people, companies, places, products; a third with non-ASCII
    letters), Zipf-distributed (weight 1/rank): one in the title of 60% of items, one
    or two per description sentence.  Subscriptions look, as keyword alerts do, mostly
    for rare terms: one to three entity names (and/or, sometimes and-not a topical word
    or and a topical word), some topical two-word co-occurrences (one in the title), and
    some category tests always combined with a word of the title; never a bare category
    test.  An alert watches a name drawn by mentions one time in ten (the first ten
    alerts always), a long-tail name otherwise.  At N = 10,000 an item matches a few
    subscriptions (the script prints it).
broad
    The first workload: no entities; every subscription tests topical words (~190 of
    them) or a pair of categories alone, so at N = 10,000 an item matches ~200
    subscriptions and the run mostly measures writing the outputs.

Subscriptions are expression trees rendered both in XPath 3.1 (what ROSES and the
naive baseline run) and in XPath 1.0 (lxml: translate() over every capital the
generator can write for lower-case()) and as a Python condition (``python_test``) with
which ``match_counts`` counts matches without an engine."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

from scale_names import CAPITALS, Entity, entities


def _words(text: str) -> list[str]:
    return text.split()


WORKLOADS = ("realistic", "broad")
DEFAULT_WORKLOAD = "realistic"
SOURCES: tuple[str, ...] = ("agence", "chronicle", "observer", "herald", "gazette")
START = datetime(2024, 6, 1, 6, 0, tzinfo=UTC)
STOPWORDS = _words(
    "the of to and in a for on as with at by from after over says new is are was "
    "about into amid than more its their could will up out"
)
TOPICAL = _words(
    "volcano eruption lava magma ash earthquake iceland reykjavík grindavík flood storm "
    "hurricane drought wildfire climate emissions carbon solar wind energy oil gas market "
    "stocks inflation bank rates budget tax trade tariff election vote parliament minister "
    "president senate court judge police protest strike union workers health hospital "
    "vaccine virus cancer study science space nasa rocket satellite moon mars telescope "
    "football match goal league cup final coach transfer tennis olympics marathon cycling "
    "film music festival museum art book novel theatre award school university students "
    "research data software apple google microsoft startup robot ai chip phone internet "
    "privacy security hacker war ceasefire army refugees border migration aid famine "
    "zürich kraków málaga são ørsted þingvellir café düsseldorf göteborg élysée "
    "europe africa asia china india brazil germany france spain norway japan "
    "glacier ocean coral forest species bird whale river city housing rent transport "
    "railway airport airline ferry bridge tunnel"
)
PROPER = set(
    _words(
        "iceland reykjavík grindavík nasa mars apple google microsoft zürich kraków málaga são "
        "ørsted þingvellir düsseldorf göteborg élysée europe africa asia china india brazil "
        "germany france spain norway japan"
    )
)
CATEGORIES = _words(
    "world science space sport politics business climate technology health culture "
    "iceland volcano football europe travel education"
)
# Zipf-like frequencies: the word of rank r comes with weight 1 / r^1.07 (the topical
# words ranked in a fixed shuffled order), function words about a third of the text.
RANKED_TOPICAL: list[str] = random.Random(3).sample(TOPICAL, len(TOPICAL))
# XPath 1.0 has no lower-case(): translate() over every capital the generator can write
# (ASCII ones, a capitalised topical word's first letter, the entity names'), no more:
# translate()'s cost grows with that list.
_ASCII = {chr(c) for c in range(ord("A"), ord("Z") + 1)}
UPPER = "".join(sorted(_ASCII | {word[0].upper() for word in TOPICAL} | set(CAPITALS)))
LOWER = UPPER.lower()
assert len(LOWER) == len(UPPER) == len(set(UPPER))
ENTITY_COUNT = 30_000
POPULAR_WATCH = 0.1  # the share of alerts on a name drawn by mentions, not the long tail
# The first alerts watch names in the news: the runs with N = 1 and 10 then have
# outputs to compare, and a small config has feeds with items.
FIRST_POPULAR = 10


def _zipf(n: int, exponent: float = 1.07) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank + 1) ** exponent for rank in range(n)))


STOP_CUM, TOPICAL_CUM = _zipf(len(STOPWORDS)), _zipf(len(TOPICAL))
CATEGORY_WEIGHTS = [1.0 / (rank + 1) for rank in range(len(CATEGORIES))]
# Words an alert pairs: past the 20 most frequent, and not inside another word of the
# vocabulary ('art' is in 'party'): a co-occurrence of two of them is rare.
_VOCABULARY = [*TOPICAL, *STOPWORDS]
PAIRABLE = [
    word
    for word in RANKED_TOPICAL[20:]
    if len(word) >= 4 and not any(word in other for other in _VOCABULARY if other != word)
]
SPLIT_STREAM = "topics"


@cache
def _mentioned() -> tuple[tuple[Entity, ...], list[float]]:
    """The entity vocabulary, most mentioned first, and its cumulative weights (1/rank)."""
    return entities(ENTITY_COUNT), _zipf(ENTITY_COUNT, 1.0)


# -- items ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    source: str
    index: int
    xml: str


def _word(rng: random.Random, word: str, first: bool) -> str:
    if first or word in PROPER or rng.random() < 0.08:
        return word[:1].upper() + word[1:]
    return word


def _sentence(rng: random.Random, low: int, high: int) -> list[str]:
    n = rng.randint(low, high)
    stops = rng.choices(STOPWORDS, cum_weights=STOP_CUM, k=n)
    topical = rng.choices(RANKED_TOPICAL, cum_weights=TOPICAL_CUM, k=n)
    words = [
        stop if rng.random() < 0.35 else word for stop, word in zip(stops, topical, strict=True)
    ]
    return [_word(rng, w, i == 0) for i, w in enumerate(words)]


def _names(rng: random.Random, k: int) -> list[str]:
    vocabulary, cumulative = _mentioned()
    return [entity.name for entity in rng.choices(vocabulary, cum_weights=cumulative, k=k)]


def _mention(rng: random.Random, words: list[str], names: Iterable[str]) -> None:
    """Insert the names into the sentence (each one token: markup wraps it whole)."""
    for name in names:
        words.insert(rng.randint(0, len(words)), name)


def _description(rng: random.Random, source: str, sentences: list[list[str]]) -> str:
    """The sentences; about a third carry HTML markup (escaped in the item)."""
    if rng.random() < 0.3:
        words = sentences[0]
        k = rng.randrange(len(words))
        href = f"https://www.{source}.example/tag/{quote(words[k].lower())}"
        words[k] = rng.choice([f"<b>{words[k]}</b>", f'<a href="{href}">{words[k]}</a>'])
        text = " ".join(f"<p>{' '.join(s)}.</p>" for s in sentences)
    else:
        text = " ".join(" ".join(s) + "." for s in sentences)
    if rng.random() < 0.05:
        text += " Q&A inside."
    return escape(text)


def _broad_text(rng: random.Random) -> tuple[str, Callable[[], list[list[str]]]]:
    """The first workload's title, and its description drawn later (as it always was)."""
    title = " ".join(_sentence(rng, 5, 11))
    return title, lambda: [_sentence(rng, 8, 18) for _ in range(rng.randint(1, 2))]


def _realistic_text(rng: random.Random) -> tuple[str, Callable[[], list[list[str]]]]:
    """A title naming an entity 60% of the time, and one or two per description
    sentence (the title's again half the time)."""
    words = _sentence(rng, 5, 11)
    in_title = _names(rng, 1) if rng.random() < 0.6 else []
    _mention(rng, words, in_title)
    sentences = [_sentence(rng, 8, 18) for _ in range(rng.randint(1, 2))]
    for sentence in sentences:
        _mention(rng, sentence, _names(rng, 1 if rng.random() < 0.7 else 2))
    if in_title and rng.random() < 0.5:
        _mention(rng, sentences[0], in_title)
    return " ".join(words), lambda: sentences


def make_item(rng: random.Random, index: int, workload: str = DEFAULT_WORKLOAD) -> Item:
    source = SOURCES[index % len(SOURCES)]
    title, description = (_realistic_text if workload == "realistic" else _broad_text)(rng)
    when = START + timedelta(seconds=index * 17 + rng.randrange(17))
    slug = quote("-".join(title.lower().split()[:4]))
    n_categories = rng.choices((0, 1, 2, 3), weights=(15, 45, 28, 12))[0]
    categories: set[str] = set()
    while len(categories) < n_categories:
        categories.add(rng.choices(CATEGORIES, weights=CATEGORY_WEIGHTS)[0])
    # sorted first: a set's order changes with the hash seed, items must not
    shown = sorted(c.capitalize() if rng.random() < 0.2 else c for c in sorted(categories))
    xml = (
        f"<item><title>{escape(title)}</title>"
        f"<link>https://www.{source}.example/{when:%Y/%m/%d}/{slug}-{index}</link>"
        f'<guid isPermaLink="false">{source}-{index:07d}</guid>'
        f"<description>{_description(rng, source, description())}</description>"
        f"<pubDate>{format_datetime(when, usegmt=True)}</pubDate>"
        + "".join(f"<category>{c}</category>" for c in shown)
        + "</item>"
    )
    return Item(source, index, xml)


def generate_items(n: int, seed: int, workload: str = DEFAULT_WORKLOAD) -> list[Item]:
    rng = random.Random(seed)
    return [make_item(rng, i, workload) for i in range(n)]


def write_events(items: Iterable[Item], path: Path) -> None:
    """The events file of `roses replay`: one JSON object per line."""
    with open(path, "w", encoding="utf-8") as fh:
        for item in items:
            record = {"source": item.source, "ts": item.index, "item": item.xml}
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def feed_document(source: str, items: Sequence[Item]) -> str:
    """An RSS 2.0 document, newest item first as real feeds list them."""
    body = "\n".join(item.xml for item in reversed(items))
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
        f"<title>{source}</title><link>https://www.{source}.example/</link>"
        f"<description>Generated feed {source}</description>\n{body}\n</channel></rss>\n"
    )


def write_feeds(items: Sequence[Item], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for source in SOURCES:
        mine = [item for item in items if item.source == source]
        (folder / f"{source}.xml").write_text(feed_document(source, mine), encoding="utf-8")
    return folder


# -- subscriptions ----------------------------------------------------------------------

Expr = tuple[Any, ...]  # ("has", field, word) | ("cat", words) | (and|or, a, b) | ("not", a)


@dataclass(frozen=True)
class Subscription:
    name: str
    sources: tuple[str, ...]
    expr: Expr

    @property
    def xpath31(self) -> str:
        return render(self.expr, xpath1=False)

    @property
    def xpath10(self) -> str:
        return render(self.expr, xpath1=True)


def render(expr: Expr, xpath1: bool) -> str:
    kind = expr[0]
    if kind == "has":
        _, where, word = expr
        lowered = f"translate({where}, '{UPPER}', '{LOWER}')" if xpath1 else f"lower-case({where})"
        return f"contains({lowered}, '{word}')"
    if kind == "cat":
        if xpath1:
            return "(" + " or ".join(f"category = '{c}'" for c in expr[1]) + ")"
        return "category = (" + ", ".join(f"'{c}'" for c in expr[1]) + ")"
    if kind == "not":
        return f"not({render(expr[1], xpath1)})"

    def wrap(sub: Expr) -> str:
        text = render(sub, xpath1)
        return f"({text})" if sub[0] in ("and", "or") else text

    return f"{wrap(expr[1])} {kind} {wrap(expr[2])}"


def _broad_expression(rng: random.Random, k: int) -> Expr:
    w1, w2, w3 = rng.sample(TOPICAL, 3)
    anywhere = rng.choice(("string(.)", "title"))
    shape = rng.choices(range(6), weights=(30, 20, 15, 10, 10, 15))[0]
    if shape == 0:
        return ("has", anywhere, w1)
    if shape == 1:
        return ("and", ("has", "title", w1), ("not", ("has", ".", w2)))
    if shape == 2:
        return ("or", ("has", anywhere, w1), ("has", anywhere, w2))
    if shape == 3:
        return ("and", ("has", "title", w1), ("has", "description", w2))
    if shape == 4:
        return ("cat", tuple(rng.sample(CATEGORIES, 2)))
    either = ("or", ("has", anywhere, w1), ("has", anywhere, w2))
    return ("and", either, ("not", ("has", ".", w3)))


def _watched(rng: random.Random, popular: float) -> str:
    """An entity's term: a name in the news (drawn by mentions) with probability
    `popular`, a name of the long tail otherwise."""
    vocabulary, cumulative = _mentioned()
    if rng.random() < popular:
        return rng.choices(vocabulary, cum_weights=cumulative)[0].term
    return rng.choice(vocabulary).term


def _realistic_expression(rng: random.Random, k: int) -> Expr:
    anywhere = rng.choice(("string(.)", "title", "."))
    popular = 1.0 if k < FIRST_POPULAR else POPULAR_WATCH
    e1, e2, e3 = (("has", anywhere, _watched(rng, popular)) for _ in range(3))
    w1, w2 = rng.sample(PAIRABLE, 2)
    shape = rng.choices(range(8), weights=(30, 12, 6, 10, 8, 6, 16, 12))[0]
    if shape == 0:  # one name
        return e1
    if shape == 1:  # either of two names
        return ("or", e1, e2)
    if shape == 2:  # a watch list of three
        return ("or", ("or", e1, e2), e3)
    if shape == 3:  # a name, but not about some topic
        return ("and", e1, ("not", ("has", ".", w1)))
    if shape == 4:  # a name on a topic
        return ("and", e1, ("has", ".", w1))
    if shape == 5:
        return ("and", ("or", e1, e2), ("not", ("has", ".", w1)))
    if shape == 6:  # two topical words together, one of them in the title
        return ("and", ("has", "title", w1), ("has", rng.choice((".", "description")), w2))
    categories = tuple(rng.sample(CATEGORIES, rng.randint(1, 2)))
    return ("and", ("cat", categories), ("has", "title", w1))


def generate_subscriptions(
    n: int, seed: int, workload: str = DEFAULT_WORKLOAD
) -> list[Subscription]:
    """n subscriptions; the first k of them are the same for every n >= k."""
    rng = random.Random(seed * 7919 + 1)
    expression = _realistic_expression if workload == "realistic" else _broad_expression
    subs = []
    for k in range(n):
        width = 1 if rng.random() < 0.7 else rng.randint(2, 3)
        sources = tuple(sorted(rng.sample(SOURCES, width)))
        subs.append(Subscription(f"s{k + 1:05d}", sources, expression(rng, k)))
    return subs


# -- matching in Python (the selectivity figures) ----------------------------------------

_VARIABLE = {"title": "title", "description": "description", ".": "text", "string(.)": "text"}


def python_test(expr: Expr) -> str:
    """The expression as a Python condition over `title`, `description`, `text` (the
    item's string value; all three lower-cased) and `category` (a set), true where its
    XPath is (the items have one title and one description)."""
    kind = expr[0]
    if kind == "has":
        return f"({expr[2]!r} in {_VARIABLE[expr[1]]})"
    if kind == "cat":
        return f"(not category.isdisjoint({expr[1]!r}))"
    if kind == "not":
        return f"(not {python_test(expr[1])})"
    return f"({python_test(expr[1])} {kind} {python_test(expr[2])})"


def _counter(tests: Sequence[tuple[int, str]]) -> Callable[..., None]:
    """One function testing every subscription of a source on an item: one generated
    `if` per subscription, no Python call per pair (10,000 x 2,000 pairs in seconds)."""
    body = "".join(f"    if {test}: counts[{k}] += 1\n" for k, test in tests) or "    pass\n"
    namespace: dict[str, Any] = {}
    exec(f"def count(title, description, text, category, counts):\n{body}", namespace)
    return namespace["count"]


def match_counts(items: Sequence[Item], subs: Sequence[Subscription]) -> list[int]:
    """For each subscription, how many of the items of its sources it matches."""
    from lxml import etree

    tests: dict[str, list[tuple[int, str]]] = {source: [] for source in SOURCES}
    for k, sub in enumerate(subs):
        for source in sub.sources:
            tests[source].append((k, python_test(sub.expr)))
    counters = {source: _counter(found) for source, found in tests.items()}
    counts = [0] * len(subs)
    for item in items:
        element = etree.fromstring(item.xml.encode("utf-8"))
        counters[item.source](
            (element.findtext("title") or "").lower(),
            (element.findtext("description") or "").lower(),
            "".join(element.itertext()).lower(),  # the string value, as XPath's
            {c.text or "" for c in element.iterfind("category")},
            counts,
        )
    return counts


# -- feeds.yaml ---------------------------------------------------------------------------


def split_by(xpath1: bool) -> str:
    if xpath1:
        return f"translate(string(category[1]), '{UPPER}', '{LOWER}')"
    return "lower-case(category[1])"


def config_text(
    subs: Sequence[Subscription], feeds: Path, settings: str, subscriptions: str | None = None
) -> str:
    """feeds.yaml: the 5 file: sources, the split stream, one stream per subscription
    (with ``subscriptions``, that file, beside feeds.yaml, holds them instead: see
    :func:`subscriptions_jsonl`)."""
    lines = ["settings:", *(f"  {line}" for line in settings.strip().splitlines()), "sources:"]
    lines += [f'  {s}: {{feed: "file:{feeds / s}.xml"}}' for s in SOURCES]
    lines += [
        "streams:",
        f"  {SPLIT_STREAM}:",
        f'    split: {{from: {{union: [{", ".join(SOURCES)}]}}, by: "{split_by(False)}"}}',
        "    publish: true",
    ]
    if subscriptions is not None:
        return "\n".join([*lines, f"subscriptions: {subscriptions}"]) + "\n"
    for sub in subs:
        origin = (
            sub.sources[0] if len(sub.sources) == 1 else f"{{union: [{', '.join(sub.sources)}]}}"
        )
        lines.append(
            f'  {sub.name}: {{filter: {{from: {origin}, where: "{sub.xpath31}"}}, publish: true}}'
        )
    return "\n".join(lines) + "\n"


def subscriptions_jsonl(subs: Sequence[Subscription]) -> bytes:
    """The subscriptions as a subscriptions file: one filter stream per line."""
    return b"".join(
        json.dumps(
            {
                "name": sub.name,
                "from": sub.sources[0] if len(sub.sources) == 1 else list(sub.sources),
                "where": sub.xpath31,
                "publish": True,
            },
            ensure_ascii=False,
        ).encode("utf-8")
        + b"\n"
        for sub in subs
    )


def spark_settings(data: Path, master: str, extra: str = "", trigger: str = "") -> str:
    trigger = f", trigger: {trigger}" if trigger else ""
    return (
        f"data_dir: {data}\n"
        f'spark: {{master: "{master}", shuffle_partitions: 2{trigger}}}\n'
        "fetch: {max_bytes: 900MB}\n" + extra
    )
