#!/usr/bin/env python3
"""Benchmark: many subscriptions over generated items, ROSES against its baselines.

Generates ITEMS realistic RSS items (default 100,000) over 5 sources and, for each N of
--subs (default 1,10,100,1000,10000), a feeds.yaml with N subscriptions (one filter
stream each: a source or a union of sources, and an XPath observer of one to three
words combined with and/or/not, or a category test) plus one split stream by the first
category.  Then measures, each in a subprocess of its own, side by side:

  spark      `roses replay --engine spark` on the events of all items
  reference  `roses replay --engine reference` on the same file (outputs compared)
  naive      feedparser over the 5 feed files, then a Python loop evaluating every
             subscription with elementpath (XPath 3.1) on every item of its sources
  lxml       lxml parse of every item and lxml's XPath 1.0 evaluation of each
             subscription's 1.0 equivalent (translate() for lower-case()): the
             parse+XPath limit of a Python program on this machine
  once       `roses once` over 5 file: feeds of --once-per-feed items (default 200),
             fresh data_dir, for N <= --once-max-subs (default 1000); and over the
             first --once-items items too when that option is given

and prints a markdown table (time, items/s, item x subscription pairs/s, peak RSS of
the whole process tree: the JVM and the Python workers included), the ratios, whether
the two engines wrote identical files, and the goals of the issue.  The naive and lxml
baselines evaluate at most --naive-pairs / --lxml-pairs pairs: beyond that they run on
the first items only and the figures are extrapolated (the table says so).  Figures
depend on the machine; run it twice and quote the second run.

    .venv/bin/python scripts/bench_scale.py [--items 100000] [--subs 1,10,100,1000,10000]
        [--quick] [--skip-spark] [--skip-once] [--once-items [M]] [--timeout 3600]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

from benchlib import add_master_and_seed, argument_parser, fill_defaults, fmt, work_folder
from proctree import PeakSampler, stop_tree


def _words(text: str) -> list[str]:
    return text.split()


BIN = Path(sys.executable).parent
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
# XPath 1.0 has no lower-case(): translate() over every capital the generator writes.
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZÀÁÂÄÅÆÇÈÉÊËÍÎÏÑÓÔÖØÚÜÞÐ"
LOWER = UPPER.lower()
# Zipf-like frequencies: the word of rank r comes with weight 1 / r^1.07 (the topical
# words ranked in a fixed shuffled order), function words about a third of the text.
RANKED_TOPICAL: list[str] = random.Random(3).sample(TOPICAL, len(TOPICAL))


def _zipf(n: int) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank + 1) ** 1.07 for rank in range(n)))


STOP_CUM, TOPICAL_CUM = _zipf(len(STOPWORDS)), _zipf(len(TOPICAL))
CATEGORY_WEIGHTS = [1.0 / (rank + 1) for rank in range(len(CATEGORIES))]
DEFAULT_SUBS = (1, 10, 100, 1000, 10000)
SPLIT_STREAM = "topics"


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


def _description(rng: random.Random, source: str) -> str:
    """One or two sentences; about a third carry HTML markup (escaped in the item)."""
    sentences = [_sentence(rng, 8, 18) for _ in range(rng.randint(1, 2))]
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


def make_item(rng: random.Random, index: int) -> Item:
    source = SOURCES[index % len(SOURCES)]
    title = " ".join(_sentence(rng, 5, 11))
    when = START + timedelta(seconds=index * 17 + rng.randrange(17))
    slug = quote("-".join(title.lower().split()[:4]))
    n_categories = rng.choices((0, 1, 2, 3), weights=(15, 45, 28, 12))[0]
    categories: set[str] = set()
    while len(categories) < n_categories:
        categories.add(rng.choices(CATEGORIES, weights=CATEGORY_WEIGHTS)[0])
    shown = sorted(c.capitalize() if rng.random() < 0.2 else c for c in categories)
    xml = (
        f"<item><title>{escape(title)}</title>"
        f"<link>https://www.{source}.example/{when:%Y/%m/%d}/{slug}-{index}</link>"
        f'<guid isPermaLink="false">{source}-{index:07d}</guid>'
        f"<description>{_description(rng, source)}</description>"
        f"<pubDate>{format_datetime(when, usegmt=True)}</pubDate>"
        + "".join(f"<category>{c}</category>" for c in shown)
        + "</item>"
    )
    return Item(source, index, xml)


def generate_items(n: int, seed: int) -> list[Item]:
    rng = random.Random(seed)
    return [make_item(rng, i) for i in range(n)]


def write_events(items: Iterable[Item], path: Path) -> None:
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


def _expression(rng: random.Random) -> Expr:
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


def generate_subscriptions(n: int, seed: int) -> list[Subscription]:
    """n subscriptions; the first k of them are the same for every n >= k."""
    rng = random.Random(seed * 7919 + 1)
    subs = []
    for k in range(n):
        width = 1 if rng.random() < 0.7 else rng.randint(2, 3)
        sources = tuple(sorted(rng.sample(SOURCES, width)))
        subs.append(Subscription(f"s{k + 1:05d}", sources, _expression(rng)))
    return subs


def split_by(xpath1: bool) -> str:
    if xpath1:
        return f"translate(string(category[1]), '{UPPER}', '{LOWER}')"
    return "lower-case(category[1])"


def config_text(subs: Sequence[Subscription], feeds: Path, settings: str) -> str:
    """feeds.yaml: the 5 file: sources, the split stream, one stream per subscription."""
    lines = ["settings:", *(f"  {line}" for line in settings.strip().splitlines()), "sources:"]
    lines += [f'  {s}: {{feed: "file:{feeds / s}.xml"}}' for s in SOURCES]
    lines += [
        "streams:",
        f"  {SPLIT_STREAM}:",
        f'    split: {{from: {{union: [{", ".join(SOURCES)}]}}, by: "{split_by(False)}"}}',
        "    publish: true",
    ]
    for sub in subs:
        origin = (
            sub.sources[0] if len(sub.sources) == 1 else f"{{union: [{', '.join(sub.sources)}]}}"
        )
        lines.append(
            f'  {sub.name}: {{filter: {{from: {origin}, where: "{sub.xpath31}"}}, publish: true}}'
        )
    return "\n".join(lines) + "\n"


def spark_settings(data: Path, master: str, extra: str = "") -> str:
    return (
        f"data_dir: {data}\n"
        f'spark: {{master: "{master}", shuffle_partitions: 2}}\n'
        "fetch: {max_bytes: 900MB}\n" + extra
    )


# -- measured runs ----------------------------------------------------------------------


@dataclass
class Run:
    wall: float
    peak_rss: int
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str


def run_measured(cmd: Sequence[str], cwd: Path, timeout: float) -> Run:
    """Run cmd in its own session; wall time and peak RSS of its whole process tree."""
    with open(cwd / "stdout.txt", "w+") as out, open(cwd / "stderr.txt", "w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, start_new_session=True)
        sampler = PeakSampler(proc.pid)
        sampler.start()
        try:
            code: int | None = proc.wait(timeout=timeout)
            stop_tree(proc, grace=2.0)  # whatever it left behind in its session
        except subprocess.TimeoutExpired:
            code = None
            stop_tree(proc)
        except BaseException:
            stop_tree(proc)
            raise
        finally:
            wall = time.perf_counter() - started
            peak = sampler.stop()
        out.seek(0)
        err.seek(0)
        return Run(wall, peak, code, out.read(), err.read())


# -- baselines (run as `bench_scale.py --worker naive|lxml ...` in a subprocess) ------


def _feed_items(path: Path) -> Iterator[Any]:
    """feedparser's entries of one feed file, rebuilt as <item> elements for XPath."""
    import feedparser
    from lxml import etree

    for entry in feedparser.parse(str(path)).entries:
        item = etree.Element("item")
        for tag, value in (
            ("title", entry.get("title")),
            ("link", entry.get("link")),
            ("guid", entry.get("id")),
            ("description", entry.get("summary")),
            ("pubDate", entry.get("published")),
        ):
            if value is not None:
                etree.SubElement(item, tag).text = value
        for tag in entry.get("tags", []):
            etree.SubElement(item, "category").text = tag.get("term")
        yield item


def naive_worker(args: argparse.Namespace) -> dict[str, Any]:
    """feedparser + one elementpath Selector per subscription, evaluated per item."""
    import elementpath
    from elementpath.xpath31 import XPath31Parser

    subs = generate_subscriptions(args.n, args.seed)
    selectors = [
        (set(s.sources), elementpath.Selector(s.xpath31, parser=XPath31Parser)) for s in subs
    ]
    parse = evaluate = 0.0
    items = matches = 0
    for source in SOURCES:
        started = time.perf_counter()
        elements = list(_feed_items(Path(args.feeds) / f"{source}.xml"))
        parse += time.perf_counter() - started
        started = time.perf_counter()
        for element in elements:
            for sources, selector in selectors:
                if source in sources and selector.select(element):
                    matches += 1
        evaluate += time.perf_counter() - started
        items += len(elements)
    return {"parse": parse, "evaluate": evaluate, "items": items, "matches": matches}


def lxml_worker(args: argparse.Namespace) -> dict[str, Any]:
    """lxml parse of each item, lxml XPath 1.0 for each subscription of its source."""
    from lxml import etree

    subs = generate_subscriptions(args.n, args.seed)
    by_source: dict[str, list[Any]] = {s: [] for s in SOURCES}
    for sub in subs:
        compiled = etree.XPath(f"boolean({sub.xpath10})")
        for source in sub.sources:
            by_source[source].append(compiled)
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    parse = evaluate = 0.0
    items = matches = checked = 0
    with open(args.events, encoding="utf-8") as fh:
        for line in itertools.islice(fh, args.sample):
            record = json.loads(line)
            started = time.perf_counter()
            element = etree.fromstring(record["item"].encode("utf-8"), parser)
            middle = time.perf_counter()
            matches += sum(1 for xpath in by_source[record["source"]] if xpath(element))
            evaluate += time.perf_counter() - middle
            parse += middle - started
            items += 1
            if items == args.check:
                checked = matches
    return {
        "parse": parse,
        "evaluate": evaluate,
        "items": items,
        "matches": matches,
        "matches_at_check": checked,
    }


# -- measurements -----------------------------------------------------------------------


@dataclass
class Row:
    n: int
    measure: str
    items: int
    seconds: float | None  # the work time the rates use; None: failed or timed out
    wall: float | None = None
    peak_rss: int | None = None
    matches: int | None = None
    note: str = ""


@dataclass
class Bench:
    args: argparse.Namespace
    work: Path
    items: list[Item]
    subs: list[Subscription]
    events: Path
    startup_events: Path
    rows: list[Row] = field(default_factory=list)
    identical: dict[int, str] = field(default_factory=dict)
    agreement: dict[int, str] = field(default_factory=dict)
    feed_dirs: dict[int, Path] = field(default_factory=dict)

    def feeds(self, n_items: int) -> Path:
        """The 5 feed files of the first n_items items (written once)."""
        if n_items not in self.feed_dirs:
            folder = self.work / f"feeds-{n_items}"
            self.feed_dirs[n_items] = write_feeds(self.items[:n_items], folder)
        return self.feed_dirs[n_items]

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        rate = "-"
        if row.seconds and row.measure != SPARK_START:
            rate = f"{row.items / row.seconds:,.0f} items/s"
        done = f"{row.seconds:.1f}s" if row.seconds is not None else "no figure"
        print(f"  N={row.n:<6} {row.measure:<30} {done:>10}  {rate}  {row.note}", file=sys.stderr)
        return row


def roses_command(*args: str) -> list[str]:
    script = BIN / "roses"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "roses_app.cli", *args]


def _failure(run: Run, timeout: float) -> str:
    """Why a measured command failed: the first exception line of its output, if any."""
    if run.returncode is None:
        return f"timed out after {timeout:,.0f}s (killed)"
    lines = [line.strip() for line in run.stderr.splitlines() if line.strip()]
    causes = [
        [line for line in lines if re.match(pattern, line)]
        for pattern in (r"roses: ", r"\w+(Error|Exception): ", r"[\w.]+(Error|Exception)\b")
    ]
    message = next((found[0] for found in causes if found), lines[-1] if lines else "no message")
    return f"failed (exit {run.returncode}): {message[:200]}"


def count_lines(paths: Iterable[Path]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as fh:
            total += sum(1 for _ in fh)
    return total


SPARK, SPARK_START, SPARK_NET = "spark replay", "spark start-up run", "spark net of start-up"
REFERENCE, NAIVE, LXML = "reference replay", "naive feedparser+elementpath", "lxml XPath 1.0 limit"
ONCE = "once"


def measure_replay(bench: Bench, n: int, engine: str, config: Path, label: str) -> Row:
    """`roses replay` of the whole event list, or of its first --startup-items events."""
    startup = label == SPARK_START
    events = bench.startup_events if startup else bench.events
    name = f"{engine}-startup" if startup else engine
    folder, out = config.parent / f"run-{name}", config.parent / f"out-{name}"
    folder.mkdir()
    cmd = roses_command("replay", "-c", str(config), "--events", str(events))
    cmd += ["--out", str(out), "--engine", engine]
    run = run_measured(cmd, folder, bench.args.timeout)
    items = bench.args.startup_items if startup else len(bench.items)
    if run.returncode != 0:
        note = _failure(run, bench.args.timeout)
        return bench.add(Row(n, label, items, None, run.wall, run.peak_rss, note=note))
    reported = re.search(r"\(([\d.]+)s\)\s*$", run.stdout.strip())
    seconds = float(reported.group(1)) if reported else run.wall
    matches = count_lines(out.glob("s*.jsonl"))
    return bench.add(Row(n, label, items, seconds, run.wall, run.peak_rss, matches))


def measure_spark(bench: Bench, n: int, config: Path) -> Row:
    """The whole replay, and (unless --skip-startup) a replay of the first few events:
    their difference is Spark's throughput net of its fixed start-up cost."""
    full = measure_replay(bench, n, "spark", config, SPARK)
    if bench.args.skip_startup or full.seconds is None:
        return full
    start = measure_replay(bench, n, "spark", config, SPARK_START)
    items = full.items - start.items
    if start.seconds is not None and full.seconds > start.seconds:
        net = full.seconds - start.seconds
        note = f"{full.seconds:.1f}s minus the {start.items:,}-item run's {start.seconds:.1f}s"
        bench.add(Row(n, SPARK_NET, items, net, note=note))
    elif start.seconds is not None:
        note = "not computed: the start-up run took as long (too few items to tell)"
        bench.add(Row(n, SPARK_NET, items, None, note=note))
    return full


def sample_size(bench: Bench, n: int, kind: str) -> int:
    budget = bench.args.naive_pairs if kind == "naive" else bench.args.lxml_pairs
    return min(len(bench.items), max(bench.args.min_sample, budget // n))


def measure_baseline(bench: Bench, n: int, kind: str) -> tuple[Row, dict[str, Any]]:
    sample = sample_size(bench, n, kind)
    folder = bench.work / f"n{n}" / f"run-{kind}"
    folder.mkdir()
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        kind,
        "--n",
        str(n),
        "--seed",
        str(bench.args.seed),
        "--feeds",
        str(bench.feeds(sample)),
        "--events",
        str(bench.events),
        "--sample",
        str(sample),
        "--check",
        str(sample_size(bench, n, "naive")),
    ]
    label = NAIVE if kind == "naive" else LXML
    run = run_measured(cmd, folder, bench.args.timeout)
    if run.returncode != 0:
        row = Row(n, label, len(bench.items), None, run.wall, run.peak_rss)
        row.note = _failure(run, bench.args.timeout)
        return bench.add(row), {}
    result = json.loads(run.stdout.strip().splitlines()[-1])
    scale = len(bench.items) / max(1, result["items"])
    seconds = (result["parse"] + result["evaluate"]) * scale
    note = f"parse {fmt(result['parse'] * scale)}s + XPath {fmt(result['evaluate'] * scale)}s"
    if result["items"] < len(bench.items):
        note = f"sampled {result['items']:,} items, extrapolated x{scale:,.0f}; " + note
    matches = result["matches"] if result["items"] == len(bench.items) else None
    row = Row(n, label, len(bench.items), seconds, run.wall, run.peak_rss, matches, note)
    return bench.add(row), result


def measure_once(bench: Bench, n: int, n_items: int) -> Row:
    folder = bench.work / f"n{n}" / f"once-{n_items}"
    folder.mkdir(parents=True)
    settings = spark_settings(folder / "data", bench.args.master)
    config = folder / "feeds.yaml"
    config.write_text(config_text(bench.subs[:n], bench.feeds(n_items), settings), "utf-8")
    run = run_measured(roses_command("once", "-c", str(config)), folder, bench.args.timeout)
    per_feed = n_items // len(SOURCES)
    label = f"{ONCE} 5 feeds x {per_feed:,}"
    if run.returncode != 0:
        note = _failure(run, bench.args.timeout)
        return bench.add(Row(n, label, n_items, None, run.wall, run.peak_rss, note=note))
    summary = dict(re.findall(r"(\w+)=(\d+)", run.stdout))
    note = f"spooled {summary.get('items_spooled', '?')}, rows {summary.get('rows_written', '?')}"
    if summary.get("failed_sources", "0") != "0":
        note += f", FAILED SOURCES {summary['failed_sources']}"
    return bench.add(Row(n, label, n_items, run.wall, run.wall, run.peak_rss, note=note))


def compare_outputs(spark: Path, reference: Path) -> str:
    files = {p.relative_to(spark) for p in spark.rglob("*") if p.is_file()}
    others = {p.relative_to(reference) for p in reference.rglob("*") if p.is_file()}
    if files != others:
        only = sorted(map(str, files ^ others))
        return f"NO: {len(only)} file(s) in one folder only, e.g. {only[0]}"
    differ = sorted(
        str(p) for p in files if (spark / p).read_bytes() != (reference / p).read_bytes()
    )
    if differ:
        return f"NO: {len(differ)} of {len(files)} files differ, e.g. {differ[0]}"
    return f"yes ({len(files)} files)"


def warm_up(bench: Bench) -> None:
    """One short Spark replay first, not counted: the first JVM start of a session also
    pays for reading the jars from disk."""
    folder = bench.work / "warm-up"
    folder.mkdir()
    config = folder / "feeds.yaml"
    settings = spark_settings(folder / "data", bench.args.master)
    config.write_text(config_text(bench.subs[:1], bench.feeds(len(bench.items)), settings), "utf-8")
    cmd = roses_command("replay", "-c", str(config), "--events", str(bench.startup_events))
    run = run_measured([*cmd, "--out", str(folder / "out")], folder, bench.args.timeout)
    outcome = "" if run.returncode == 0 else f": {_failure(run, bench.args.timeout)}"
    print(f"== Spark warm-up: {run.wall:.1f}s (not counted){outcome}", file=sys.stderr)


def once_sizes(args: argparse.Namespace, n_items: int) -> list[int]:
    sizes = [min(n_items, args.once_per_feed * len(SOURCES))]
    if args.once_items is not None:
        extra = n_items if args.once_items < 0 else min(args.once_items, n_items)
        if extra not in sizes:
            sizes.append(extra)
    return sizes


def measure_n(bench: Bench, n: int) -> None:
    args = bench.args
    folder = bench.work / f"n{n}"
    folder.mkdir()
    config = folder / "feeds.yaml"
    settings = spark_settings(folder / "data", args.master)
    config.write_text(config_text(bench.subs[:n], bench.feeds(len(bench.items)), settings), "utf-8")
    print(f"== N={n:,} subscriptions ({config})", file=sys.stderr)
    spark = None if args.skip_spark else measure_spark(bench, n, config)
    reference = (
        None if args.skip_reference else measure_replay(bench, n, "reference", config, REFERENCE)
    )
    if spark and reference and spark.seconds is not None and reference.seconds is not None:
        bench.identical[n] = compare_outputs(folder / "out-spark", folder / "out-reference")
    if not args.skip_baselines:
        _, naive = measure_baseline(bench, n, "naive")
        _, limit = measure_baseline(bench, n, "lxml")
        if naive and limit and naive["items"] <= limit["items"]:
            same = naive["matches"] == limit["matches_at_check"]
            bench.agreement[n] = (
                f"{'yes' if same else 'NO'}: {naive['matches']:,} vs {limit['matches_at_check']:,}"
                f" matching pairs over the first {naive['items']:,} items"
            )
    if not args.skip_once and n <= args.once_max_subs:
        for size in once_sizes(args, len(bench.items)):
            measure_once(bench, n, size)


# -- report -----------------------------------------------------------------------------

LEGEND = """\
What the figures mean:
- time s: the work time the rates use.  Replays: the time `roses replay` reports (0.1 s
  resolution: reading the events, starting Spark's JVM and queries for spark,
  evaluating, writing the outputs; not the CLI's imports and config loading, which
  `wall s` includes).  naive and lxml: feed/item parsing plus XPath evaluation, without
  interpreter start-up; when sampled, scaled linearly to all items.  once: the whole
  `roses once` process (poll the file: feeds, spool, Spark, store, static export).
- spark start-up run: the same replay on the first few events only: mostly the JVM,
  the Python workers and starting the queries.  spark net of start-up: the whole
  replay's time minus that run's, over the remaining items: Spark's throughput once
  started (the daemon pays the start-up once, a replay or `roses once` every time).
- items/s: items / time.  pairs/s: items x N subscriptions / time (every pair is
  offered; a subscription only tests the items of its own sources; the split stream is
  not counted).
- peak RSS: the highest sum of resident memory over the process tree, sampled every
  0.2 s (the CLI, Spark's JVM and its Python workers); a run of a second or less may
  end before its peak is sampled.
- matches: item x subscription pairs that matched (lines of the s*.jsonl outputs); only
  for complete runs.  naive rebuilds items from feedparser's entries, so it may differ.
- lxml XPath 1.0 limit: the fastest a Python program can go here when it parses every
  item and tests every subscription on it one by one with libxml2's C XPath engine; an
  engine that indexes the subscriptions (e.g. by their words) may beat it at large N.
- ratios: the second measure's time / the first's (above 1: the first is faster)."""


def table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| N | measure | items | time s | wall s | items/s | pairs/s | peak RSS MB | matches "
        "| note |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        rate = r.items / r.seconds if r.seconds and r.measure != SPARK_START else None
        pairs = rate * r.n if rate is not None else None
        rss = r.peak_rss / 2**20 if r.peak_rss else None
        lines.append(
            f"| {r.n:,} | {r.measure} | {r.items:,} | {fmt(r.seconds)} | {fmt(r.wall)} "
            f"| {fmt(rate, ',.0f')} | {fmt(pairs, ',.0f')} | {fmt(rss, ',.0f')} "
            f"| {fmt(r.matches, ',d')} | {r.note} |"
        )
    return lines


def find(rows: Sequence[Row], n: int, measure: str) -> Row | None:
    """The row of that measure for N subscriptions, if it has a figure."""
    for row in rows:
        if row.n == n and row.measure == measure and row.seconds is not None:
            return row
    return None


def speedup(fast: Row | None, slow: Row | None) -> str:
    if fast is None or slow is None or not fast.seconds or slow.seconds is None:
        return "-"
    return f"{slow.seconds / fast.seconds:.2f}x"


RATIOS = (
    (SPARK, REFERENCE, "spark vs reference"),
    (SPARK_NET, REFERENCE, "spark net vs reference"),
    (SPARK, NAIVE, "spark vs naive"),
    (SPARK_NET, NAIVE, "spark net vs naive"),
    (SPARK_NET, LXML, "spark net vs lxml limit"),
    (REFERENCE, NAIVE, "reference vs naive"),
)


def ratios(rows: Sequence[Row], subs: Sequence[int]) -> list[str]:
    lines = ["| N | " + " | ".join(title for _, _, title in RATIOS) + " |"]
    lines.append("|---:|" + "---:|" * len(RATIOS))
    for n in subs:
        cells = [speedup(find(rows, n, a), find(rows, n, b)) for a, b, _ in RATIOS]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return lines


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


SPARK_FIGURES = ((SPARK_NET, "net of start-up"), (SPARK, "with start-up"))


def _rate_goal(rows: Sequence[Row], n: int, target: int) -> str:
    parts = []
    for measure, what in SPARK_FIGURES:
        row = find(rows, n, measure)
        if row is not None and row.seconds:
            rate = row.items / row.seconds
            parts.append(
                f"{what} {rate:,.0f} items/s ({row.items:,} items): {_verdict(rate >= target)}"
            )
    return "; ".join(parts) or "not measured"


def _time_goal(rows: Sequence[Row]) -> str:
    parts = []
    for measure, what in SPARK_FIGURES:
        big, ten = find(rows, 10000, measure), find(rows, 10, measure)
        if big is not None and ten is not None and big.seconds is not None and ten.seconds:
            factor = big.seconds / ten.seconds
            parts.append(f"{what} {factor:.1f}x: {_verdict(factor <= 5)}")
    return "; ".join(parts) or "not measured"


def goals(rows: Sequence[Row], once_items: int) -> list[str]:
    """The issue's goals, checked on the Spark engine (the one the daemon runs)."""
    label = f"{ONCE} 5 feeds x {once_items // len(SOURCES):,}"
    once = find(rows, 1000, label)
    once_text = "not measured"
    if once is not None and once.seconds is not None:
        once_text = f"{once.seconds:.1f}s: {_verdict(once.seconds < 120)}"
    return [
        f"- a single filter+split stream (N=1) >= 100,000 items/s: {_rate_goal(rows, 1, 100_000)}",
        f"- 10,000 subscriptions >= 20,000 items/s: {_rate_goal(rows, 10000, 20_000)}",
        f"- 10,000 subscriptions in at most 5x the time of 10: {_time_goal(rows)}",
        f"- `roses once` with 1,000 subscriptions, {once_items:,} items: under 2 minutes: "
        + once_text,
    ]


def machine() -> str:
    with open("/proc/meminfo") as fh:
        memory = dict(line.split(":", 1) for line in fh)
    ram = int(memory["MemTotal"].split()[0]) / 2**20
    usable = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    return (
        f"Machine: nproc {usable} (of {os.cpu_count()} CPUs), {ram:.1f} GiB RAM, load average"
        f" {load:.2f} at the start; Python {sys.version.split()[0]}.  Shared machines and"
        " other load change the figures: run twice and quote the second run."
    )


def report(bench: Bench, subs: Sequence[int], caveat: str) -> None:
    args = bench.args
    print(f"# ROSES at scale: {len(bench.items):,} items over {len(SOURCES)} sources\n")
    print(caveat + f"  Spark master {args.master}.\n")
    print("\n".join(table(bench.rows)) + "\n")
    print("Speed ratios (the second's time / the first's; above 1: the first is faster):\n")
    print("\n".join(ratios(bench.rows, subs)) + "\n")
    for n in subs:
        if n in bench.identical:
            print(f"- N={n:,}: spark and reference outputs identical: {bench.identical[n]}")
        if n in bench.agreement:
            print(f"- N={n:,}: naive and lxml baselines agree: {bench.agreement[n]}")
    print("\nGoals (issue), on the Spark engine:\n")
    once_items = min(len(bench.items), args.once_per_feed * len(SOURCES))
    print("\n".join(goals(bench.rows, once_items)))
    print("\n" + LEGEND)


# -- command line -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argument_parser(__doc__)
    add = parser.add_argument
    add("--items", type=int, help="generated items (default 100,000; --quick: 1,000)")
    add("--subs", help="comma-separated subscription counts (default 1,10,100,1000,10000)")
    add("--quick", action="store_true", help="a small smoke run: 1,000 items, N = 1,10")
    add("--skip-spark", action="store_true", help="no `roses replay --engine spark`")
    add("--skip-startup", action="store_true", help="no short Spark run to net out start-up")
    add("--startup-items", type=int, default=10, help="events of the start-up run (default 10)")
    add("--skip-reference", action="store_true", help="no `roses replay --engine reference`")
    add("--skip-baselines", action="store_true", help="no naive and lxml baselines")
    add("--skip-once", action="store_true", help="no `roses once` runs")
    add("--once-per-feed", type=int, help="items per feed for `roses once` (default 200)")
    add("--once-items", type=int, nargs="?", const=-1, help="also run once over M items (all)")
    add("--once-max-subs", type=int, default=1000, help="largest N for `roses once`")
    add("--naive-pairs", type=int, help="pairs the naive loop evaluates before sampling")
    add("--lxml-pairs", type=int, help="pairs the lxml limit evaluates before sampling")
    add("--min-sample", type=int, default=200, help="fewest items a sampled baseline runs on")
    add("--timeout", type=float, help="seconds per measurement before it is killed")
    add_master_and_seed(parser)
    add("--work", help="working folder (default: a new temporary one)")
    add("--keep", action="store_true", help="keep the working folder (generated files, outputs)")
    for hidden in ("--worker", "--feeds", "--events"):
        add(hidden, help=argparse.SUPPRESS)
    for hidden in ("--n", "--sample", "--check"):
        add(hidden, type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = {
        "items": (1_000, 100_000),
        "once_per_feed": (20, 200),
        "naive_pairs": (5_000, 2_000_000),
        "lxml_pairs": (50_000, 5_000_000),
        "timeout": (900.0, 3600.0),
    }
    fill_defaults(args, defaults)
    if args.quick and args.min_sample == 200:
        args.min_sample = 100
    return args


def subscription_counts(args: argparse.Namespace) -> list[int]:
    if args.subs:
        return [int(part.replace("_", "")) for part in args.subs.split(",") if part.strip()]
    return [1, 10] if args.quick else list(DEFAULT_SUBS)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker = naive_worker if args.worker == "naive" else lxml_worker
        print(json.dumps(worker(args)))
        return 0
    subs = subscription_counts(args)
    caveat = machine()
    with work_folder("roses-scale-", args.keep, args.work) as work:
        print(f"working in {work}; {caveat}", file=sys.stderr)
        started = time.perf_counter()
        items = generate_items(args.items, args.seed)
        events, startup_events = work / "events.jsonl", work / "events-startup.jsonl"
        write_events(items, events)
        write_events(items[: args.startup_items], startup_events)
        subscriptions = generate_subscriptions(max(subs), args.seed)
        bench = Bench(args, work, items, subscriptions, events, startup_events)
        elapsed = time.perf_counter() - started
        print(f"generated {len(items):,} items in {elapsed:.1f}s", file=sys.stderr)
        if not args.skip_spark:
            warm_up(bench)
        for n in subs:
            measure_n(bench, n)
    report(bench, subs, caveat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
