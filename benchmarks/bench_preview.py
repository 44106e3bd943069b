"""Live preview latency: a filter typed in the console, previewed over the spool's last items.

For each spool size (--spooled, default 10,000 and 100,000 items of bench_scale's
realistic workload, five sources, appended 100 items at a time as polls are) and each
config size (--streams, default 1, 100 and 10,000 keyword subscriptions defined), a
Previewer previews keyword observers over the last --limit items (10,000) of every source
(a union stream of them): the first preview (the spool's tail read and parsed) apart,
then --keystrokes previews of other observers (each a new expression, as typing
makes), p50 and p99.

    .venv/bin/python benchmarks/bench_preview.py
    .venv/bin/python benchmarks/bench_preview.py --spooled 10000 --streams 1 --keystrokes 50
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import argument_parser, work_folder
from scale_workload import (
    SOURCES,
    config_text,
    generate_items,
    generate_subscriptions,
    subscriptions_jsonl,
)

from roses_app.config import load_config
from roses_app.publish.preview import Previewer, PreviewRequest
from roses_app.spool import Spool

POLL = 100  # items per spool append
EVERY = "every-source"  # the stream the previewed filters read: every source's items


def build_spool(root: Path, count: int) -> None:
    items = generate_items(count, seed=7)
    spool = Spool(root)
    try:
        for start in range(0, count, POLL):
            polls: dict[str, list[tuple[str, int | None]]] = {}
            for item in items[start : start + POLL]:
                polls.setdefault(item.source, []).append((item.xml, None))
            spool.append_many(list(polls.items()))
    finally:
        spool.close()


def write_config(folder: Path, streams: int) -> Path:
    subs = generate_subscriptions(streams, seed=7)
    (folder / "subscriptions.jsonl").write_bytes(subscriptions_jsonl(subs))
    settings = f"data_dir: {folder / 'data'}\n"
    text = config_text(subs, folder / "feeds", settings, "subscriptions.jsonl")
    every = f"  {EVERY}:\n    union: [{', '.join(SOURCES)}]\n"  # what the previews read
    text = text.replace("streams:\n", "streams:\n" + every, 1)
    path = folder / "feeds.yaml"
    path.write_text(text)
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(config_path: Path, spool_root: Path, limit: int, keystrokes: int) -> str:
    config = load_config(config_path)
    previewer = Previewer(lambda: config, spool_root)
    typed = generate_subscriptions(keystrokes + 1, seed=99)
    first = typed[0]
    started = time.perf_counter()
    cold = previewer.preview(PreviewRequest(first.xpath31, "where", EVERY, limit=limit))
    cold_s = time.perf_counter() - started
    assert cold.problems == (), cold.problems
    times, matched, evaluated = [], [], []
    for sub in typed[1:]:
        request = PreviewRequest(sub.xpath31, "where", EVERY, limit=limit)
        started = time.perf_counter()
        result = previewer.preview(request)
        times.append(time.perf_counter() - started)
        assert result.problems == (), result.problems
        matched.append(result.matched)
        evaluated.append(result.evaluated)
    return (
        f"cold {cold_s * 1000:7.0f} ms (scanned {cold.scanned:,})  "
        f"p50 {percentile(times, 0.5) * 1000:6.1f} ms  p99 {percentile(times, 0.99) * 1000:6.1f} ms"
        f"  (matched median {statistics.median(matched):.0f}, "
        f"evaluated median {statistics.median(evaluated):.0f} of {cold.scanned:,})"
    )


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--spooled", default="10000,100000", help="spool sizes, comma-separated")
    parser.add_argument("--streams", default="1,100,10000", help="config sizes, comma-separated")
    parser.add_argument("--limit", type=int, default=10_000, help="items each preview reads")
    parser.add_argument("--keystrokes", type=int, default=100, help="previews measured warm")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    print(f"sources: {', '.join(SOURCES)}; previews over the last {args.limit:,} items of all")
    with work_folder("bench_preview-", args.keep) as work:
        for spooled in (int(n) for n in args.spooled.split(",")):
            spool_root = work / f"spool-{spooled}"
            started = time.perf_counter()
            build_spool(spool_root, spooled)
            print(f"{spooled:,} items spooled in {time.perf_counter() - started:.1f} s")
            for streams in (int(n) for n in args.streams.split(",")):
                folder = work / f"config-{spooled}-{streams}"
                folder.mkdir()
                config_path = write_config(folder, streams)
                line = measure(config_path, spool_root, args.limit, args.keystrokes)
                print(f"  spooled {spooled:>7,}  streams {streams:>6,}: {line}", flush=True)


if __name__ == "__main__":
    main()
