import pytest

from pardnn.units import format_bytes, format_time, parse_rate, parse_size, parse_time


@pytest.mark.parametrize("text, expected", [
    ("16GiB", 16 * 2**30), ("16G", 16 * 2**30), ("512MB", 512 * 10**6), ("1.5KiB", 1536), ("100", 100),
    ("2 TiB", 2 * 2**40), ("64kb", 64000), (1024, 1024),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("12GB/s", 12000.0), ("12GiB/s", 12 * 2**30 / 1e6), ("100Gbit/s", 12500.0), ("25Gbps", 3125.0),
    ("900GB/s", 900000.0), ("12000", 12000.0),
    # a capital B is bytes, a small b bits, as network rates are written (a SPEC trial: 12Gb/s was read as
    # 12 GB/s, 12GBps as bits: each 8x off without a word)
    ("12Gb/s", 1500.0), ("12GBps", 12000.0), ("12Gbps", 1500.0), ("100GBit/s", 12500.0), ("12G/s", 12000.0),
    ("12GB/S", 12000.0), ("12 bytes/s", 12e-6),
])
def test_rates_in_bytes_per_microsecond(text, expected):
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, expected", [("25us", 25.0), ("25µs", 25.0), ("0.5ms", 500.0), ("100ns", 0.1),
                                            ("1s", 1e6), ("7", 7.0)])
def test_times_in_microseconds(text, expected):
    assert parse_time(text) == pytest.approx(expected)


@pytest.mark.parametrize("fn, text", [(parse_size, "16 parsecs"), (parse_size, "GiB"), (parse_rate, "12GB"),
                                      (parse_rate, "12Q/s"), (parse_rate, "12Gbps/s"), (parse_rate, "12GBPS"),
                                      (parse_time, "3 fortnights")])
def test_bad_units_are_value_errors(fn, text):
    with pytest.raises(ValueError):
        fn(text)


def test_formatting():
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(float("inf")) == "unlimited"
    assert format_time(12.5) == "12.5 us"
    assert format_time(2500) == "2.500 ms"
