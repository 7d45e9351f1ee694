"""linc_core.instances.any_file: a benchmark file's format and name read from its text."""

from __future__ import annotations

import time

import pytest

from linc_core.instances import InstanceError
from linc_core.instances.any_file import (
    format_of_text,
    name_in_text,
    read_instance,
    read_instance_text,
)

TSPLIB = (
    "NAME : tri3\nTYPE : TSP\nDIMENSION : 3\nEDGE_WEIGHT_TYPE : EUC_2D\n"
    "NODE_COORD_SECTION\n1 0 0\n2 3 4\n3 0 4\nEOF\n"
)


def test_the_format_and_name_come_from_the_text(data_dir):
    solomon = (data_dir / "solomon100" / "C101.txt").read_text()
    assert format_of_text(solomon) == "solomon" and name_in_text(solomon) == "C101"
    assert format_of_text(TSPLIB) == "tsplib" and name_in_text(TSPLIB) == "tri3"
    cvrplib = TSPLIB.replace("TYPE : TSP", "TYPE : CVRP")
    assert format_of_text(cvrplib) == "cvrplib"
    file_format, instance = read_instance_text(TSPLIB, "tri3")
    assert file_format == "tsplib" and instance.problem == "tsp"
    assert instance.locs.shape == (1, 3, 2)


def test_text_that_is_no_instance_is_one_error_naming_source_field_and_value():
    with pytest.raises(InstanceError) as raised:
        format_of_text("hello world, this is not a routing instance at all", "upload.txt")
    assert str(raised.value).startswith(
        "upload.txt: field 'instance' = 'hello world, this is not a routing insta': "
        "neither a Solomon"
    )
    assert name_in_text("two words\nmore") is None


def _read(text: str) -> float:
    """Seconds to read ``text``'s name and format, and the instance if it is one."""
    began = time.perf_counter()
    name_in_text(text)
    try:
        read_instance_text(text, "upload")
    except InstanceError as refused:
        assert "neither a Solomon file" in str(refused)
    return time.perf_counter() - began


def _ratio(make) -> float:
    """How much longer 3.2 MB of ``make(size)`` takes to read than 0.8 MB: the best of five
    runs each, taken in turns (the shared cores' load then weighs on both alike)."""
    small, large = make(800_000), make(3_200_000)
    times = [(_read(small), _read(large)) for _ in range(5)]
    return min(t for _, t in times) / min(t for t, _ in times)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("line", ["\n", " \n", "\r\n", "\t \n"])
def test_sniffing_is_linear_in_text_of_many_blank_lines(line):
    # A served request's text: the line-start patterns once swallowed the blank lines after
    # each line start and retried from every one: quadratic (0.2 MB of them took 113 s on the
    # shared 2 cores, holding the GIL of the model server).
    ratio = _ratio(lambda size: line * (size // len(line)) + "two words")
    assert ratio < 10, f"4x the text took {ratio:.1f}x the time (linear: ~4, quadratic: ~16)"


@pytest.mark.timeout(120)
def test_a_file_padded_with_blank_lines_reads_in_linear_time(data_dir):
    c101 = (data_dir / "solomon100" / "C101.txt").read_text()
    lines = c101.splitlines()

    def padded(size: int) -> str:
        gap = "\n" * (size // len(lines))
        return gap.join(lines) + "\n"

    assert read_instance_text(padded(800_000))[1].num_customers == 100
    ratio = _ratio(padded)
    assert ratio < 10, f"4x the text took {ratio:.1f}x the time (linear: ~4, quadratic: ~16)"


def test_lines_are_read_one_at_a_time():
    # a keyword on a line of its own, whatever blank lines or CRLF surround it
    text = "\n\n  \r\nNAME : far\r\n\n\nTYPE:\r\n\nTSP\n"
    assert name_in_text(text) == "far"
    with pytest.raises(InstanceError):  # TYPE's value is not on its line
        format_of_text(text)
    assert format_of_text("\n \n TYPE : TSP \r\n") == "tsplib"
    assert format_of_text("x\n\n VEHICLE \r\nCUSTOMER\n") == "solomon"
    assert name_in_text("\n\n\n  C101 \nVEHICLE\n") == "C101"


def test_a_folder_is_named_as_one_not_by_its_missing_extension(data_dir):
    folder = data_dir / "solomon100"
    with pytest.raises(ValueError) as err:
        read_instance(folder)
    assert (
        str(err.value)
        == f"{folder}: a folder, not an instance file (a folder of instances is a set)"
    )
