"""Figures as PNG bytes, and their notebook form with alternative text."""

from __future__ import annotations

import base64
import re

import pytest

from linc_core.utils.plotting import Picture, new_figure, png_bytes


def _png() -> bytes:
    figure = new_figure(2.0, 1.0)
    figure.add_subplot().plot([0, 1], [1, 0])
    return png_bytes(figure)


def test_png_bytes_is_a_png_of_the_figure_size():
    png = _png()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (200, 100)  # 2 x 1 inches at 100 dpi


def test_picture_html_carries_the_alt_text_and_the_image():
    png = _png()
    shown = Picture(png, 'Cost per epoch: "train" & <validation>')._repr_html_()
    alt = re.search(r'alt="([^"]*)"', shown).group(1)
    assert alt == "Cost per epoch: &quot;train&quot; &amp; &lt;validation&gt;"
    data = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', shown).group(1)
    assert base64.b64decode(data) == png
    assert shown.count("<") == 1  # the text cannot open a tag of its own


@pytest.mark.parametrize(
    ("png", "alt", "message"),
    [(b"GIF89a", "a chart", "not PNG"), (b"\x89PNG\r\n\x1a\n", "  ", "alt is empty")],
)
def test_picture_refuses_what_it_cannot_show(png, alt, message):
    with pytest.raises(ValueError, match=message):
        Picture(png, alt)
