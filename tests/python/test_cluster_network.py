"""Keeping a cluster on loopback: the private namespace, and the socket audit
that proves nothing listened on or reached another address (no Ray needed)."""

import subprocess
import sys
import textwrap

import pytest

from spillway.cluster import network
from spillway.errors import SpillwayError

# Listens on HOST, connects to itself, says it is ready, waits for stdin.
SERVER = textwrap.dedent(
    """
    import socket, sys
    server = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
    server.bind((sys.argv[1], 0))
    server.listen()
    client = socket.create_connection(server.getsockname()[:2])
    print('ready', flush=True)
    sys.stdin.read()
    """
)


def serving(host):
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, host], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline() == "ready\n"
    return process


@pytest.mark.parametrize("host,foreign", [("127.0.0.1", 0), ("::1", 0), ("0.0.0.0", 1)])
def test_the_audit_finds_sockets_outside_loopback_and_only_those(host, foreign):
    process = serving(host)
    try:
        found = network.sockets([process.pid])
        # The listener, the client and the accepted end (not yet accepted:
        # it is in the listener's queue, not a descriptor of the process).
        assert len(found) == 2, [str(entry) for entry in found]
        assert sum(entry.peer is None for entry in found) == 1, "the listener has no peer"
        bad = network.foreign_sockets([process.pid])
        assert len(bad) == foreign, [str(entry) for entry in bad]
        if foreign:
            assert "0.0.0.0:" in str(bad[0]) and f"pid {process.pid}" in str(bad[0])
    finally:
        process.communicate("")
    assert network.sockets([process.pid]) == [], "a process that is gone holds nothing"


def test_a_command_in_the_private_namespace_sees_only_loopback_and_reaches_nothing_else():
    probe = textwrap.dedent(
        """
        import socket
        from spillway.cluster import network
        print(network.interfaces(), network.is_isolated())
        try:
            socket.create_connection(('192.0.2.1', 80), timeout=5)
            print('reached')
        except OSError as error:
            print('unreachable', error.errno)
        """
    )
    try:
        command = network.isolated_command([sys.executable, "-c", probe])
    except SpillwayError as error:
        pytest.skip(str(error))
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "['lo'] True"
    assert lines[1].startswith("unreachable"), lines


def test_starting_outside_the_namespace_is_refused_with_the_way_in():
    if network.is_isolated():
        pytest.skip("this test process is itself in a loopback-only namespace")
    with pytest.raises(SpillwayError, match="spillway cluster local -- COMMAND"):
        network.require_isolation("spillway.cluster.local()")
    with pytest.raises(SpillwayError, match="no command"):
        network.isolated_command([])
