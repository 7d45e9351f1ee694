"""linc_core.instances.any_file: a benchmark file's format and name read from its text."""

from __future__ import annotations

import pytest

from linc_core.instances import InstanceError
from linc_core.instances.any_file import format_of_text, name_in_text, read_instance_text

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
