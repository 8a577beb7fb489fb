"""What a user sends through the small doors, told back in the user's terms: `maestro ask --image` with a folder,
and an IPv6 host on the image allow-list, bracketed or not."""

from __future__ import annotations

import functools
import http.server
import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maestro_graph.doors.cli import app
from maestro_graph.doors.serve import ServeSettings
from maestro_graph.images.sources import ImageRefused, ImageSources

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_ask_with_a_folder_as_image_says_it_is_a_folder():
    result = CliRunner().invoke(app, ["ask", "How many circles are there?", "--image", str(EXAMPLES)])
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert f"--image {EXAMPLES}: is a folder, not an image file" in message and "no such file" not in message


class _IPv6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture(scope="module")
def ipv6_host():
    """A loopback HTTP server on ::1 holding the example images."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    server = _IPv6Server(("::1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("entry", ["::1", "[::1]", "[::1]:{port}", "0:0:0:0:0:0:0:1"])
def test_an_ipv6_allow_list_entry_matches_with_or_without_brackets(ipv6_host, entry):
    sources = ImageSources(allowed_hosts=(entry.format(port=ipv6_host),))
    (url,) = sources.resolve([f"http://[::1]:{ipv6_host}/qrcode.png"])
    assert url.startswith("data:image/png;base64,")


def test_ipv6_entries_refuse_other_ports_and_bad_entries_stop_the_start(ipv6_host):
    with pytest.raises(ImageRefused, match=r"remote image host '\[::1\]:1' is not in the allow-list"):
        ImageSources(allowed_hosts=(f"[::1]:{ipv6_host}",)).resolve(["http://[::1]:1/qrcode.png"])
    assert ServeSettings(allowed_image_hosts=("[::1]",)).image_sources().allowed_hosts == ("::1",)
    with pytest.raises(ValueError, match=r"'\[::1' is not `name`, `name:port`, an IPv6 address or `\[IPv6\]:port`"):
        ServeSettings(allowed_image_hosts=("[::1",))
