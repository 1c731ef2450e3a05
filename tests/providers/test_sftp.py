"""The SFTP adapter against a real SFTP server (asyncssh, in this process, chrooted to a
temporary directory): what lands on the server, one session per use, host-key pinning and
how failures are classified for the dispatch queue."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from herald.demo.sftp_server import SftpTestServer, start_sftp_server
from providers.sftp import (
    SftpConfigError,
    SftpFileTooLarge,
    SftpSettings,
    SftpTransientError,
    openssh_key_line,
    sftp_session,
)
from providers.suppliers import is_permanent_failure
from tests.support.waiting import wait_for

EDI = b"ISA*00*          *00*          *ZZ*HERALD~GS*PO~ST*850*0001~SE*2*0001~GE*1*1~IEA*1*1~"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The server's file system: what a client sees as ``/``."""
    return tmp_path / "sftp"


@pytest.fixture
def server(root: Path) -> Iterator[SftpTestServer]:
    with start_sftp_server(root) as running:
        yield running


def files_under(root: Path) -> list[str]:
    """Every regular file on the server, as a client's absolute path."""
    return sorted("/" + str(path.relative_to(root)) for path in root.rglob("*")
                  if path.is_file())


def other_key_line(algorithm: str = "ssh-ed25519") -> str:
    return openssh_key_line(asyncssh.generate_private_key(algorithm).convert_to_public())


# --------------------------------------------------------------------------- put


def test_put_creates_the_missing_outbound_directory_and_leaves_exactly_the_file(
        server: SftpTestServer, root: Path) -> None:
    with sftp_session(server.settings(outbound_dir="/outbound/sysco")) as session:
        path = session.put("/outbound/sysco/orders", "850_000000017.x12", EDI)

    assert path == "/outbound/sysco/orders/850_000000017.x12"
    assert files_under(root) == ["/outbound/sysco/orders/850_000000017.x12"]
    assert (root / "outbound/sysco/orders/850_000000017.x12").read_bytes() == EDI


def test_a_reader_never_sees_a_half_written_file(server: SftpTestServer, root: Path) -> None:
    # Hold the upload mid-write: only the .part name exists, and a reader skips it.
    server.pause_writes()
    errors: list[BaseException] = []

    def upload() -> None:
        try:
            with sftp_session(server.settings()) as session:
                session.put("/outbound", "850_1.x12", EDI)
        except BaseException as error:
            errors.append(error)
            raise

    uploader = threading.Thread(target=upload)
    uploader.start()
    try:
        wait_for(lambda: server.writes_waiting == 1, what="the upload to be in flight")
        assert files_under(root) == ["/outbound/850_1.x12.part"]
        with sftp_session(server.settings()) as reader:
            assert reader.list_candidates("/outbound") == []
    finally:
        server.resume_writes()
        uploader.join(30)

    assert errors == []
    assert files_under(root) == ["/outbound/850_1.x12"]
    assert (root / "outbound/850_1.x12").read_bytes() == EDI


def test_put_replaces_a_file_of_the_same_name(server: SftpTestServer, root: Path) -> None:
    (root / "outbound").mkdir(parents=True)
    (root / "outbound/850_1.x12").write_bytes(b"an older attempt")

    with sftp_session(server.settings()) as session:
        session.put("/outbound", "850_1.x12", EDI)

    assert files_under(root) == ["/outbound/850_1.x12"]
    assert (root / "outbound/850_1.x12").read_bytes() == EDI


@pytest.mark.parametrize("name", ["", "..", "sub/850.x12", ".850.x12", "850.x12.part",
                                  "850.x12.tmp"])
def test_put_refuses_a_name_that_is_not_a_plain_readable_file_name(
        server: SftpTestServer, root: Path, name: str) -> None:
    with sftp_session(server.settings()) as session, pytest.raises(ValueError):
        session.put("/outbound", name, EDI)

    assert files_under(root) == []
    assert not (root / "outbound").exists()


# --------------------------------------------------------------------------- inbound


def test_list_candidates_skips_hidden_temporary_partial_files_and_directories(
        server: SftpTestServer, root: Path) -> None:
    inbound = root / "inbound"
    (inbound / "archive").mkdir(parents=True)
    for name in ["855_b.x12", ".855_c.x12", "855_d.x12.tmp", "855_e.x12.part", "997_a.x12"]:
        (inbound / name).write_bytes(b"x")

    with sftp_session(server.settings()) as session:
        assert session.list_candidates("/inbound") == ["855_b.x12", "997_a.x12"]


def test_get_reads_a_file_and_move_archives_it_into_archive_and_archive_failed(
        server: SftpTestServer, root: Path) -> None:
    inbound = root / "inbound"
    inbound.mkdir()
    (inbound / "855_1.x12").write_bytes(EDI)
    (inbound / "855_2.x12").write_bytes(b"not X12 at all")

    with sftp_session(server.settings()) as session:
        assert session.get("/inbound/855_1.x12") == EDI
        assert session.move("/inbound/855_1.x12", "/archive") == "/archive/855_1.x12"
        assert session.move("/inbound/855_2.x12", "/archive/failed") == \
            "/archive/failed/855_2.x12"
        assert session.list_candidates("/inbound") == []

    assert files_under(root) == ["/archive/855_1.x12", "/archive/failed/855_2.x12"]
    assert (root / "archive/855_1.x12").read_bytes() == EDI
    assert (root / "archive/failed/855_2.x12").read_bytes() == b"not X12 at all"


def test_get_with_a_cap_reads_a_file_up_to_it_and_not_a_byte_of_a_larger_one(
        server: SftpTestServer, root: Path) -> None:
    inbound = root / "inbound"
    inbound.mkdir()
    (inbound / "at_cap.x12").write_bytes(EDI)
    (inbound / "over_cap.x12").write_bytes(EDI + b"~")

    with sftp_session(server.settings()) as session:
        assert session.get("/inbound/at_cap.x12", max_bytes=len(EDI)) == EDI
        read_so_far = server.bytes_read
        with pytest.raises(SftpFileTooLarge, match=f"over the {len(EDI)} bytes") as raised:
            session.get("/inbound/over_cap.x12", max_bytes=len(EDI))

    assert server.bytes_read == read_so_far
    assert raised.value.size == len(EDI) + 1 and is_permanent_failure(raised.value)


def test_ensure_dir_creates_parents_and_keeps_an_existing_directory(
        server: SftpTestServer, root: Path) -> None:
    (root / "archive").mkdir()
    (root / "archive/kept.x12").write_bytes(b"x")

    with sftp_session(server.settings()) as session:
        session.ensure_dir("/archive/failed/2024")
        session.ensure_dir("/archive")

    assert (root / "archive/failed/2024").is_dir()
    assert files_under(root) == ["/archive/kept.x12"]


# --------------------------------------------------------------------------- sessions


def test_one_session_per_with_block_and_none_left_open_after_it(
        server: SftpTestServer) -> None:
    with sftp_session(server.settings()) as session:
        session.put("/outbound", "850_1.x12", EDI)
        session.list_candidates("/outbound")
        session.get("/outbound/850_1.x12")
        assert (server.sessions_opened, server.sessions_open) == (1, 1)
    wait_for(lambda: server.sessions_open == 0, what="the session to be closed")

    with sftp_session(server.settings()) as session:
        session.put("/outbound", "850_2.x12", EDI)
    wait_for(lambda: server.sessions_open == 0, what="the second session to be closed")
    assert server.sessions_opened == 2


def test_the_session_is_closed_when_the_body_raises(server: SftpTestServer) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), sftp_session(server.settings()) as session:
        session.put("/outbound", "850_1.x12", EDI)
        raise Boom

    wait_for(lambda: server.sessions_open == 0, what="the session to be closed")
    assert server.sessions_opened == 1


# --------------------------------------------------------------------------- host keys


def test_the_first_host_key_is_handed_over_and_then_required(
        server: SftpTestServer, root: Path) -> None:
    recorded: list[str] = []
    with sftp_session(server.settings(), on_new_host_key=recorded.append) as session:
        session.put("/outbound", "850_1.x12", EDI)
    assert recorded == [server.host_key_line]

    # the recorded key is accepted, and nothing new is reported
    settings = server.settings(host_key=recorded[0])
    with sftp_session(settings, on_new_host_key=recorded.append) as session:
        session.put("/outbound", "850_2.x12", EDI)
    assert recorded == [server.host_key_line]
    assert files_under(root) == ["/outbound/850_1.x12", "/outbound/850_2.x12"]


@pytest.mark.parametrize("algorithm", ["ssh-ed25519", "ecdsa-sha2-nistp256"])
def test_a_different_host_key_is_refused_before_anything_is_written(
        server: SftpTestServer, root: Path, algorithm: str) -> None:
    recorded: list[str] = []
    with pytest.raises(SftpConfigError, match="host key") as refused, \
            sftp_session(server.settings(), known_host_key=other_key_line(algorithm),
                         on_new_host_key=recorded.append) as session:
        session.put("/outbound", "850_1.x12", EDI)

    assert is_permanent_failure(refused.value)
    assert files_under(root) == []
    assert recorded == []
    wait_for(lambda: server.sessions_open == 0, what="the refused connection to be closed")


def test_a_wrong_password_is_a_permanent_configuration_error(
        server: SftpTestServer, root: Path) -> None:
    recorded: list[str] = []
    with pytest.raises(SftpConfigError, match="authentication refused") as refused, \
            sftp_session(server.settings(password="not-the-password"),
                         on_new_host_key=recorded.append) as session:
        session.put("/outbound", "850_1.x12", EDI)

    assert is_permanent_failure(refused.value)
    assert recorded == []  # a key is recorded only from a session that logged in
    assert files_under(root) == []


# --------------------------------------------------------------------------- transient


def test_a_stopped_server_is_a_transient_error(server: SftpTestServer) -> None:
    settings = server.settings()
    server.stop()

    with pytest.raises(SftpTransientError) as failed, sftp_session(settings):
        pass

    assert not is_permanent_failure(failed.value)


def test_a_server_that_never_answers_times_out_as_a_transient_error() -> None:
    # A TCP listener that accepts nothing: the SSH banner never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        settings = SftpSettings("127.0.0.1", silent.getsockname()[1], "herald", "pw",
                                "/outbound", "/inbound", "/archive")
        with pytest.raises(SftpTransientError, match="no answer in time") as failed, \
                sftp_session(settings, connect_timeout=0.5):
            pass

    assert not is_permanent_failure(failed.value)


def test_a_stalled_upload_times_out_and_the_session_is_still_closed(
        server: SftpTestServer, root: Path) -> None:
    server.pause_writes()
    try:
        with pytest.raises(SftpTransientError, match="no answer in time"), \
                sftp_session(server.settings(), operation_timeout=0.5) as session:
            session.put("/outbound", "850_1.x12", EDI)
        wait_for(lambda: server.sessions_open == 0, what="the stalled session to be closed")
    finally:
        server.resume_writes()

    assert not (root / "outbound/850_1.x12").exists()


# --------------------------------------------------------------------------- settings


def test_settings_from_a_supplier_record_default_the_port_and_hide_the_password() -> None:
    settings = SftpSettings.from_mapping({
        "host": "sftp.example.test", "username": "herald", "password": "hunter2",
        "outbound_dir": "/out", "inbound_dir": "/in", "archive_dir": "/archive"})

    assert settings.port == 22
    assert settings.host_key is None
    assert "hunter2" not in repr(settings)


def test_missing_settings_are_a_configuration_error_naming_them() -> None:
    with pytest.raises(SftpConfigError, match="missing SFTP settings: inbound_dir, password"):
        SftpSettings.from_mapping({"host": "h", "username": "u", "outbound_dir": "/o",
                                   "archive_dir": "/a"})
    with pytest.raises(SftpConfigError, match="no SFTP settings"):
        SftpSettings.from_mapping(None)


def test_invalid_settings_are_refused_with_every_problem_named() -> None:
    with pytest.raises(SftpConfigError) as invalid:
        SftpSettings("", 70000, "u", "", "/o", "", "/a", host_key="ssh-ed25519 not-base64")

    message = str(invalid.value)
    for problem in ["host must be", "port must be", "password must be",
                    "inbound_dir must be", "host_key must be one or more OpenSSH public key lines"]:
        assert problem in message
    assert is_permanent_failure(invalid.value)
