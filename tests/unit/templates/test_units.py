import pytest

from pooltemplates.units import parse_size, scale_size


@pytest.mark.parametrize(("text", "size", "has_unit"), [
    ("60g", 60 << 30, True), ("2000m", 2000 << 20, True), ("10G", 10 << 30, True),
    ("512kb", 512 << 10, True), (" 1t ", 1 << 40, True), ("640b", 640, True),
    ("10737418240", 10737418240, False),
])
def test_parse_size_reads_spark_memory_strings(text: str, size: int, has_unit: bool) -> None:
    parsed = parse_size(text)
    assert (parsed.bytes, parsed.has_unit) == (size, has_unit)


@pytest.mark.parametrize(("text", "reason"), [
    ("1.5g", "fractional"), ("g", "not a memory size"), ("-1g", "not a memory size"),
    ("10 gb", "not a memory size"), ("3x", "unknown unit 'x'"), ("", "not a memory size"),
])
def test_parse_size_rejects_what_spark_rejects(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_size(text)


@pytest.mark.parametrize(("text", "factor", "scaled"), [
    ("60g", 1, "60g"), ("1g", 2, "2g"), ("512m", 2, "1g"), ("1536m", 3, "4608m"), ("3k", 5, "15k"),
])
def test_scale_size_keeps_whole_units(text: str, factor: int, scaled: str) -> None:
    assert scale_size(text, factor) == scaled
