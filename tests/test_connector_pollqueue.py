"""PollQueue: due order, slots in flight, politeness per host, driven with made-up times."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.connectors.pollqueue import PollQueue, host_of


def test_host_of():
    assert host_of("http://Example.org/feed") == "example.org:80"
    assert host_of("https://example.org/feed") == "example.org:443"
    assert host_of("http://example.org:8080/a") == "example.org:8080"
    assert host_of("file:feeds/a.xml") == "file"


def test_due_sources_start_in_due_order_and_not_before():
    q = PollQueue(concurrency=10, per_host=10, spacing=0.0)
    q.schedule("late", "a", 5.0)
    q.schedule("early", "b", 1.0)
    q.schedule("middle", "c", 3.0)
    assert q.take(0.5) == []
    assert q.next_wakeup() == 1.0
    assert q.take(4.0) == [("early", 1.0), ("middle", 3.0)]
    assert q.next_wakeup() == 5.0
    assert q.take(10.0) == [("late", 5.0)]
    assert q.in_flight == 3 and len(q) == 0


def test_with_a_backlog_the_earliest_deadline_goes_first():
    """A first round of many quiet feeds (due at 0, polled every 900 s) must not make a
    busy feed (due at 60, polled every 60 s) wait behind all of them: by deadline it
    goes first; a quiet one whose deadline comes first still goes before it."""
    q = PollQueue(concurrency=1, per_host=10, spacing=0.0)
    for n in range(5):
        q.schedule(f"quiet{n}", f"h{n}", 0.0, slack=900.0)
    q.schedule("busy", "hb", 60.0, slack=60.0)
    q.schedule("due soon", "hd", 50.0, slack=10.0)
    assert q.take(0.0) == [("quiet0", 0.0)]
    q.done("quiet0")
    assert q.take(70.0) == [("due soon", 50.0)]  # deadline 60
    q.done("due soon")
    assert q.take(70.0) == [("busy", 60.0)]  # deadline 120, before the quiet ones' 900
    q.done("busy")
    q.schedule("busy", "hb", 880.0, slack=60.0)  # deadline 940: the quiet ones first
    started = []
    for _ in range(5):
        started += q.take(890.0)
        q.done(started[-1][0])
    assert [name for name, _ in started] == [f"quiet{n}" for n in range(1, 5)] + ["busy"]


def test_a_source_at_risk_goes_before_sources_past_their_deadlines():
    """The end of a long first round: feeds never polled, due at 0 with deadlines of
    900 s, are all overdue at 2,000 s; a busy feed whose document would overflow (at
    risk, deadline 2,060) goes before them, and among sources at risk the earliest
    deadline first; the others keep their deadline order after them."""
    q = PollQueue(concurrency=1, per_host=10, spacing=0.0)
    for n in range(3):
        q.schedule(f"new{n}", f"h{n}", 0.0, slack=900.0 + n)
    q.schedule("busy", "hb", 2000.0, slack=60.0, at_risk=True)
    q.schedule("busier", "hc", 1990.0, slack=30.0, at_risk=True)
    q.schedule("quiet", "hq", 1000.0, slack=900.0)  # known, deadline 1,900: not at risk
    started = []
    for _ in range(6):
        started += q.take(2000.0)
        q.done(started[-1][0])
    assert [name for name, _ in started] == ["busier", "busy", "new0", "new1", "new2", "quiet"]


def test_concurrency_bounds_polls_in_flight_and_a_done_frees_a_slot():
    q = PollQueue(concurrency=2, per_host=10, spacing=0.0)
    for n in range(5):
        q.schedule(f"s{n}", f"h{n}", float(n))
    assert [name for name, _ in q.take(10.0)] == ["s0", "s1"]
    assert q.take(10.0) == []  # full: nothing dropped, they wait
    q.done("s1")
    assert q.take(10.0) == [("s2", 2.0)]  # the most overdue next: its lag is 8 s
    q.done("s0")
    q.done("s2")
    assert [name for name, _ in q.take(10.0)] == ["s3", "s4"]


def test_per_host_bound_and_spacing():
    q = PollQueue(concurrency=100, per_host=2, spacing=1.0)
    for n in range(4):
        q.schedule(f"a{n}", "a:80", 0.0)
    q.schedule("b0", "b:80", 0.0)
    first = q.take(0.0)
    assert sorted(name for name, _ in first) == ["a0", "b0"]  # one start per host now
    assert q.take(0.5) == []  # spacing
    assert q.next_wakeup() == 1.0
    assert q.take(1.0) == [("a1", 0.0)]
    assert q.take(2.0) == []  # two in flight on a:80
    q.done("a0")
    assert q.take(2.0) == [("a2", 0.0)]


def test_a_busy_host_does_not_hold_the_others():
    q = PollQueue(concurrency=3, per_host=1, spacing=0.0)
    for n in range(50):
        q.schedule(f"big{n}", "big", 0.0)
    q.schedule("small", "small", 5.0)
    assert q.take(0.0) == [("big0", 0.0)]
    # 49 sources wait for their host; the other host's source starts on time
    assert q.take(5.0) == [("small", 5.0)]
    assert q.in_flight == 2


def test_rescheduling_and_unscheduling():
    q = PollQueue(concurrency=10, per_host=10, spacing=0.0)
    q.schedule("a", "h", 1.0)
    q.schedule("a", "h", 7.0)  # moved: the old time is forgotten
    q.schedule("b", "h", 2.0)
    q.unschedule("b")
    assert q.take(5.0) == []
    assert q.due_at("a") == 7.0
    assert q.take(7.0) == [("a", 7.0)]
    assert q.next_wakeup() is None


@settings(max_examples=200, deadline=None)
@given(
    dues=st.lists(
        st.tuples(st.integers(0, 4), st.floats(0.0, 20.0, allow_nan=False)),
        min_size=1,
        max_size=40,
    ),
    concurrency=st.integers(1, 6),
    per_host=st.integers(1, 3),
    spacing=st.sampled_from([0.0, 0.5, 2.0]),
    durations=st.lists(st.floats(0.1, 3.0), min_size=1, max_size=5),
)
def test_every_source_starts_once_within_every_bound(
    dues: list[tuple[int, float]],
    concurrency: int,
    per_host: int,
    spacing: float,
    durations: list[float],
):
    """Simulated time: each poll lasts a while; nothing is dropped or started twice,
    never before its time, never beyond a bound, and a host's starts are spaced."""
    q = PollQueue(concurrency, per_host, spacing)
    host = {}
    for n, (h, at) in enumerate(dues):
        q.schedule(f"s{n}", f"h{h}", at)
        host[f"s{n}"] = f"h{h}"
    ends: dict[str, float] = {}
    starts: dict[str, float] = {}
    now = 0.0
    for _ in range(10_000):
        for name, due in q.take(now):
            assert due <= now and name not in starts
            starts[name] = now
            ends[name] = now + durations[len(starts) % len(durations)]
        running = [n for n in ends if ends[n] > now or n not in ends]
        assert q.in_flight <= concurrency
        for h in set(host.values()):
            assert sum(1 for n in running if host[n] == h and n in q._running) <= per_host
        finished = [n for n, end in ends.items() if end <= now and n in q._running]
        if len(starts) == len(dues) and not q._running:
            break
        upcoming = [end for n, end in ends.items() if n in q._running]
        wake = q.next_wakeup()
        candidates = [*upcoming, *([wake] if wake is not None else [])]
        for name in finished:
            q.done(name)
        if finished:
            continue
        now = max(now, min(candidates)) if candidates else now + 1.0
    assert set(starts) == {f"s{n}" for n in range(len(dues))}
    for h in set(host.values()):
        times = sorted(t for n, t in starts.items() if host[n] == h)
        assert all(b - a >= spacing - 1e-9 for a, b in itertools.pairwise(times))


def test_a_full_host_seen_by_next_wakeup_starts_again_once_released():
    """next_wakeup() met a host at its per-host bound and put it aside: its release
    must offer it again (it once stayed aside for good, and its sources waited)."""
    queue = PollQueue(concurrency=10, per_host=1, spacing=0.0)
    for name in ("a1", "a2"):
        queue.schedule(name, "a:80", 0.0)
    assert [name for name, _ in queue.take(1.0)] == ["a1"]  # a:80 is full
    queue.next_wakeup()  # meets a:80, full: put aside
    queue.release("a1")
    queue.done("a1")
    assert queue.next_wakeup() is not None
    assert [name for name, _ in queue.take(1.0)] == ["a2"]


def _startable(q: PollQueue, now: float) -> str | None:
    """A due source whose host has a slot and no spacing to wait, with room in flight
    (what take() must have started)."""
    if q.in_flight >= q.concurrency:
        return None
    for name, at in q._due.items():
        host = q._host[name]
        if at <= now and q._busy[host] < q.per_host and q._next_start.get(host, 0.0) <= now:
            return name
    return None


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_after_take_nothing_that_could_start_is_left_waiting(seed: int):
    """Random schedules, unschedules, releases, ends, wakeup questions and clock
    steps: after each take() no due source that may start is left (next_wakeup() once
    put a host aside and its release did not bring it back: its sources waited)."""
    rng = __import__("random").Random(seed)
    q = PollQueue(rng.randint(1, 4), rng.randint(1, 2), rng.choice([0.0, 0.5, 1.0]))
    names, hosts = [f"s{i}" for i in range(8)], ["h0", "h1", "h2"]
    now, fetching, running = 0.0, set(), set()
    for _ in range(60):
        op = rng.random()
        if op < 0.35:
            name = rng.choice(names)
            if name not in running:
                at, slack = now + rng.choice([0, 0.2, 1, 2]), rng.choice([0, 5])
                q.schedule(name, q._host.get(name) or rng.choice(hosts), at, slack,
                           at_risk=rng.random() < 0.2)  # fmt: skip
        elif op < 0.45 and q._due:
            q.unschedule(rng.choice(sorted(q._due)))
        elif op < 0.6 and fetching:
            name = rng.choice(sorted(fetching))
            q.release(name)
            fetching.discard(name)
        elif op < 0.75 and running:
            name = rng.choice(sorted(running))
            q.done(name)
            running.discard(name)
            fetching.discard(name)
        elif op < 0.85:
            q.next_wakeup()
        else:
            now += rng.choice([0.1, 0.5, 1.0])
        for name, _ in q.take(now):
            fetching.add(name)
            running.add(name)
        assert _startable(q, now) is None
