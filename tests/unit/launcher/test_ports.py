"""trainrun.ports: a port for a server that another process starts moments later, picked where no outgoing
connection's source port can take it."""
import socket
from pathlib import Path

from trainrun.ports import PICK_SPAN, ephemeral_range, pick_free_port


def test_the_port_is_free_and_just_below_the_ephemeral_range(tmp_path: Path) -> None:
    source = tmp_path / "ip_local_port_range"
    source.write_text("40000\t60999\n")
    for _ in range(20):
        port = pick_free_port("127.0.0.1", source)
        assert 40000 - PICK_SPAN <= port < 40000
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_where_the_range_cannot_be_read_or_leaves_no_room_below_it_the_kernel_picks(tmp_path: Path) -> None:
    unreadable, low = tmp_path / "missing", tmp_path / "low"
    low.write_text("1100 65535\n")
    for source in (unreadable, low):
        port = pick_free_port("127.0.0.1", source)
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_the_range_is_read_as_the_kernel_writes_it(tmp_path: Path) -> None:
    source = tmp_path / "range"
    source.write_text("32768\t60999\n")
    assert ephemeral_range(source) == (32768, 60999)
    source.write_text("garbage\n")
    assert ephemeral_range(source) is None
