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

Backs: docs/benchmarks.md, section 'The console' (the live preview alone: p50 and p99 a
keystroke, the first preview) and the console's preview table (through bench_console.py).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Row, bench_parser, fill_defaults, repeated, report, work_folder
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


def measure(config_path: Path, spool_root: Path, limit: int, keystrokes: int) -> Row:
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
    return {
        "first preview ms": round(cold_s * 1000),
        "scanned": cold.scanned,
        "p50 ms": percentile(times, 0.5) * 1000,
        "p99 ms": percentile(times, 0.99) * 1000,
        "matched (median)": statistics.median(matched),
        "evaluated (median)": statistics.median(evaluated),
    }


def preview_rows(work: Path, spooled: list[int], streams: list[int], limit: int,
                 keystrokes: int) -> list[Row]:  # fmt: skip
    """A row per spool size and config size (spools built in `work`, once per run)."""
    rows: list[Row] = []
    for count in spooled:
        spool_root = work / f"spool-{count}"
        shutil.rmtree(spool_root, ignore_errors=True)
        started = time.perf_counter()
        build_spool(spool_root, count)
        print(f"{count:,} items spooled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for defined in streams:
            folder = work / f"config-{count}-{defined}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            config_path = write_config(folder, defined)
            row = measure(config_path, spool_root, limit, keystrokes)
            rows.append({"items spooled": count, "streams defined": defined, **row})
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    add = parser.add_argument
    add("--spooled", help="spool sizes, comma-separated (default 10000,100000; --quick 1000)")
    add("--streams", help="config sizes, comma-separated (default 1,100,10000; --quick 1,10)")
    add("--limit", type=int, help="items each preview reads (default 10,000; --quick 1,000)")
    add("--keystrokes", type=int, help="previews measured warm (default 100; --quick 10)")
    add("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    fill_defaults(args, {"spooled": ("1000", "10000,100000"), "streams": ("1,10", "1,100,10000"),
                         "limit": (1_000, 10_000), "keystrokes": (10, 100)})  # fmt: skip
    spooled = [int(n) for n in args.spooled.split(",")]
    streams = [int(n) for n in args.streams.split(",")]
    with work_folder("bench_preview-", args.keep) as work:
        runs = repeated(
            args, lambda: preview_rows(work, spooled, streams, args.limit, args.keystrokes)
        )
    report(
        args,
        f"The console's live preview: a keyword filter over the last {args.limit:,} items",
        runs,
        notes=[f"Sources: {', '.join(SOURCES)}; {args.keystrokes} previews measured after "
               "the first (each a new observer); p50 and p99 of those."],
    )  # fmt: skip


if __name__ == "__main__":
    main()
