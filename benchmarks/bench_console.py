"""The console's figures (issue 44): preview latency, pages' server time, apply to item.

1. Preview latency (benchmarks/bench_preview.py's measurement): a keyword filter previewed
   over the last 10,000 spooled items, with 10,000 and 100,000 items spooled and 1, 100
   and 10,000 streams defined; the first preview apart, then p50 and p99 of the next
   --keystrokes (goal: p50 <= 300 ms at 10,000 items).
2. The console's pages on the server at 100,000 sources and at 100,000 streams
   (tests/test_console_scale.py's measurement, through Starlette's test client; goal:
   200 ms a page).
3. Apply to first item: a `roses run` daemon polls a local feed (127.0.0.1, every 1 s);
   a new filter stream is applied through the console (log in, the editor's CSRF token,
   POST /console/apply, which writes feeds.yaml and reloads), then /feeds/NAME.rss is
   read every 50 ms until it has an item.  --applies streams, one after another.

    .venv/bin/python benchmarks/bench_console.py          # 100 previews a case, 5 applies
    .venv/bin/python benchmarks/bench_console.py --quick  # 30 and 3: about 5 minutes here
    .venv/bin/python benchmarks/bench_console.py --only apply

Backs: docs/benchmarks.md, section 'The console' (the two preview tables, --quick and
the full run; the pages and apply-to-first-item figures of the full run).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the test helpers reused below

import httpx  # noqa: E402
from benchlib import Row, Section, bench_parser, fill_defaults, repeated, report, work_folder  # noqa: E402

PASSWORD = "bench console password"
CONFIG = """\
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "local[2]", trigger: 500ms}}
  console: {{password_hash: '{hash}'}}
sources:
  news: {{feed: "{feed}", every: 1s}}
streams:
  everything:
    filter: {{from: news, where: "true()"}}
    publish: true
"""


def preview_latency(spooled: list[int], streams: list[int], keystrokes: int, limit: int
                    ) -> list[Row]:  # fmt: skip
    import bench_preview

    with work_folder("bench_console-preview-", False) as work:
        return bench_preview.preview_rows(work, spooled, streams, limit, keystrokes)


def page_times() -> list[str]:
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    import test_console_scale

    lines = ["The console's pages, time on the server (Starlette's test client):"]
    for test in (test_console_scale.test_sources_pages_at_100000_sources,
                 test_console_scale.test_streams_pages_at_100000_streams):  # fmt: skip
        with work_folder("bench_console-pages-", False) as work:
            said = io.StringIO()
            with contextlib.redirect_stdout(said):
                test(work)
            lines += [f"  {line}" for line in said.getvalue().splitlines()]
    return lines


@contextlib.contextmanager
def running_daemon(work: Path) -> Iterator[tuple[Any, Any, str]]:
    from test_connector_support import FeedServer
    from test_e2e import Site, free_port
    from test_lifecycle import Job

    from roses_app.config.console import hash_password

    server = FeedServer()
    port = free_port()
    config = work / "feeds.yaml"
    config.write_text(CONFIG.format(data=work / "data", port=port, feed=server.url("/news.xml"),
                                    hash=hash_password(PASSWORD)))  # fmt: skip
    site = Site(server)
    job = Job(config, port, work / "roses.log")
    try:
        yield site, job, job.url("")
    except BaseException:
        print((work / "roses.log").read_text()[-4000:], file=sys.stderr)
        raise
    finally:
        if job.proc is not None and job.proc.poll() is None:
            job.kill_everything()
        server.close()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert found, "no CSRF token on the editor's page"
    return found.group(1)


def apply_to_item(applies: int) -> list[Row]:
    from test_e2e import wait_for

    rows: list[Row] = []
    with work_folder("bench_console-apply-", False) as work, running_daemon(work) as (
        site, job, base,
    ):  # fmt: skip
        site.publish(*[(f"g{n}", f"Story {n} about topic{n % applies}") for n in range(50)])
        started = time.perf_counter()
        job.start()
        print(f"  daemon healthy in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        wait_for(lambda: len(job.guids("/feeds/everything.rss")) == 50, 180, "the items")
        with httpx.Client(base_url=base, headers={"Origin": base}, timeout=120) as client:
            login = client.post("/console/login", data={"password": PASSWORD})
            assert login.status_code in (200, 303) and client.cookies, login.status_code
            for n in range(applies):
                csrf = csrf_of(client.get("/console/editor").text)
                name = f"topic-{n}"
                fields = {"csrf": csrf, "name": name, "kind": "where", "source": "news",
                          "text": f"ends-with(title, ' topic{n}')", "publish": "on"}  # fmt: skip
                started = time.perf_counter()
                answer = client.post("/console/apply", data=fields)
                posted = time.perf_counter() - started
                assert answer.status_code == 200 and f"Applied {name}" in answer.text, answer.text
                while not job.guids(f"/feeds/{name}.rss"):
                    if time.perf_counter() - started > 180:
                        raise AssertionError(f"no item in /feeds/{name}.rss after 180 s")
                    time.sleep(0.05)
                total = time.perf_counter() - started
                rows.append({"stream": name, "POST s": posted, "first item s": total})
    return rows


def main() -> None:
    parser = bench_parser(__doc__, quick="fewer previews and applies (30 and 3)")
    parser.add_argument("--only", choices=["preview", "pages", "apply"], action="append")
    parser.add_argument("--spooled", default="10000,100000")
    parser.add_argument("--streams", default="1,100,10000")
    parser.add_argument("--limit", type=int, default=10_000)
    parser.add_argument("--keystrokes", type=int, default=None, help="100; 30 with --quick")
    parser.add_argument("--applies", type=int, default=None, help="5; 3 with --quick")
    args = parser.parse_args()
    fill_defaults(args, {"keystrokes": (30, 100), "applies": (3, 5)})
    only = set(args.only or ["preview", "pages", "apply"])
    runs: list[list[Row]] = []
    sections: list[Section] = []
    notes: list[str] = []
    if "preview" in only:
        spooled = [int(n) for n in args.spooled.split(",")]
        streams = [int(n) for n in args.streams.split(",")]
        runs = repeated(
            args, lambda: preview_latency(spooled, streams, args.keystrokes, args.limit)
        )
    if "pages" in only:
        notes += page_times()
    if "apply" in only:
        apply_title = "Apply to first item: POST /console/apply on a running daemon"
        sections.append((apply_title, repeated(args, lambda: apply_to_item(args.applies))))
    title = (
        f"The console: previews over the last {args.limit:,} spooled items, "
        f"{args.keystrokes} measured after the first"
    )
    if not runs:  # no previews: the first table is the applies'
        if not sections:
            raise SystemExit("--only pages alone makes no table: add --only preview or apply")
        title, first = sections.pop(0)
        runs = [list(run) for run in first]
    report(args, title, runs, notes, sections)


if __name__ == "__main__":
    main()
