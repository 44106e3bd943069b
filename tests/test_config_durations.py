"""Durations and sizes as written in feeds.yaml."""

from __future__ import annotations

import pytest

from roses_app.config.durations import format_duration, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        ("2m30s", 150.0),
        ("1d2h3m4s5ms", 93784.005),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        (" 10m ", 600.0),
        ("90", 90.0),
        ("2.5", 2.5),
        ("0s", 0.0),
        (90, 90.0),
        (1.5, 1.5),
        (0, 0.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "10 minutes",
        "10min",
        "1h 30m",
        "h",
        "",
        "-5s",
        "1.2.3s",
        "10M",
        "30m1h",
        "1h1h",
        "ms",
        "1e3s",
        "nan",
        "inf",
    ],
)
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match=r"bad duration"):
        parse_duration(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}, -1, float("nan"), float("inf")])
def test_bad_duration_values(value: object) -> None:
    with pytest.raises(ValueError, match=r"bad duration"):
        parse_duration(value)


def test_duration_message_tells_how_to_write_one() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("10 minutes")
    assert str(info.value) == "bad duration '10 minutes' (use e.g. 90s, 10m, 2h, 1d, 1h30m)"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5400, "1h30m"), (0.5, "500ms"), (0, "0s"), (90061.001, "1d1h1m1s1ms"), (604800, "1w")],
)
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("20MB", 20 * 1024**2),
        ("512KB", 512 * 1024),
        ("512kb", 512 * 1024),
        ("1GB", 1024**3),
        ("1GiB", 1024**3),
        ("2 MB", 2 * 1024**2),
        ("1.5KB", 1536),
        ("100B", 100),
        ("100", 100),
        ("4k", 4096),
        (4096, 4096),
        (4096.0, 4096),
        (0, 0),
    ],
)
def test_parse_size(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("value", ["20 Mega", "MB", "", "-1KB", "1.5.KB", True, None, 1.5, -3])
def test_bad_sizes(value: object) -> None:
    with pytest.raises(ValueError, match=r"bad size"):
        parse_size(value)
