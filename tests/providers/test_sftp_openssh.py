"""The SFTP adapter against a real OpenSSH server (Debian's sshd, ``internal-sftp``) that
holds three host keys, ed25519, ECDSA and RSA, as a stock installation does: whichever of
them the operator recorded, as ``ssh-keyscan`` printed it, the server proves it and the
order lands; a key the server does not hold is refused before the password is sent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from providers.sftp import SftpConfigError, openssh_key_line, sftp_session
from providers.suppliers import is_permanent_failure
from tests.support.sshd import KEY_TYPES, Sshd, require_root, running_sshd
from tests.support.waiting import wait_for

EDI = b"ISA*00*          *00*          *ZZ*HERALD~GS*PO~ST*850*0001~SE*2*0001~GE*1*1~IEA*1*1~"
#: What sshd logs (LogLevel DEBUG1) once a client asks to log in: any method, the
#: password's included.
LOGIN_ATTEMPT = re.compile(r"userauth-request|password", re.IGNORECASE)
#: What it logs when a connection ends before any login.
ENDED_PREAUTH = re.compile(r"(Disconnected from|Connection closed by|Connection reset by|"
                           r"Received disconnect from) .*\[preauth\]")


@pytest.fixture(scope="module")
def sshd() -> Iterator[Sshd]:
    require_root()
    with running_sshd() as server:
        yield server


def outbound(server: Sshd) -> Path:
    return server.user.home / "outbound"


def without_host(line: str) -> str:
    """The key of an ``ssh-keyscan`` line, without the host names in front."""
    return line.split(maxsplit=1)[1]


@pytest.mark.parametrize("key_type", list(KEY_TYPES))
def test_the_recorded_key_of_each_type_alone_is_the_one_the_server_proves(
        sshd: Sshd, key_type: str) -> None:
    scanned = sshd.key_lines[key_type]
    # Given only this key recorded, exactly as ssh-keyscan printed it, or bare (as in
    # the server's .pub file)
    for form, host_key in (("scanned", scanned), ("bare", without_host(scanned))):
        name = f"850_{key_type}_{form}.x12"

        # When an order is dropped
        with sftp_session(sshd.settings(host_key=host_key)) as session:
            session.put(str(outbound(sshd)), name, EDI)
            presented = session.host_key_line

        # Then the server proved that key, and the file is there, whole
        assert presented == without_host(scanned), form
        assert (outbound(sshd) / name).read_bytes() == EDI, form


def test_all_three_keys_recorded_together_connect(sshd: Sshd) -> None:
    # Given every line ssh-keyscan printed, as one host_key
    settings = sshd.settings(host_key=sshd.keyscan)

    with sftp_session(settings) as session:
        session.put(str(outbound(sshd)), "850_all.x12", EDI)
        presented = session.host_key_line

    assert presented in {without_host(line) for line in sshd.key_lines.values()}
    assert (outbound(sshd) / "850_all.x12").read_bytes() == EDI


def test_keys_the_server_does_not_hold_are_refused_before_the_password_is_sent(
        sshd: Sshd) -> None:
    # Given a key of each type the server has, none of them its own
    strangers = "".join(
        f"[127.0.0.1]:{sshd.port} "
        f"{openssh_key_line(asyncssh.generate_private_key(algorithm).convert_to_public())}\n"
        for algorithm in KEY_TYPES.values())
    mark = sshd.log_size()

    # When a session is opened with them
    with pytest.raises(SftpConfigError, match="host key does not match") as refused, \
            sftp_session(sshd.settings(host_key=strangers)) as session:
        session.put(str(outbound(sshd)), "850_stranger.x12", EDI)

    # Then it fails for good, nothing was written, and sshd saw the connection end before
    # any login was asked for: the password never left
    assert is_permanent_failure(refused.value)
    assert not (outbound(sshd) / "850_stranger.x12").exists()
    wait_for(lambda: ENDED_PREAUTH.search(sshd.log(mark)),
             what="sshd to log the refused connection's end")
    assert not LOGIN_ATTEMPT.search(sshd.log(mark)), sshd.log(mark)

    # (whereas a session with its key logs the password login that check looks for)
    mark = sshd.log_size()
    with sftp_session(sshd.settings(host_key=sshd.keyscan)) as session:
        session.list_candidates(str(sshd.user.home))
    assert re.search(r"userauth-request .* method password", sshd.log(mark))


def test_a_server_holding_no_key_of_the_recorded_types_is_refused_for_good(
        sshd: Sshd) -> None:
    # Given a server with only an ed25519 key, and its supplier's ECDSA and RSA keys
    # recorded (as another server's ssh-keyscan printed them)
    recorded = sshd.key_lines["ecdsa"] + "\n" + sshd.key_lines["rsa"] + "\n"
    with running_sshd(key_types=("ed25519",)) as ed25519_only:
        mark = ed25519_only.log_size()

        # When a session is opened (OpenSSH closes it: none of the offered algorithms)
        with pytest.raises(SftpConfigError, match="host key does not match") as refused, \
                sftp_session(ed25519_only.settings(host_key=recorded)):
            pass

        # Then it fails for good (not as a lost connection, retried), naming the key the
        # server has, and no login was ever asked for
        assert is_permanent_failure(refused.value)
        assert "ssh-ed25519" in str(refused.value)
        # (the session's connection, refused in the negotiation, and the key exchange
        # with no login that told why)
        wait_for(lambda: "no matching host key type" in ed25519_only.log(mark)
                 and ENDED_PREAUTH.search(ed25519_only.log(mark)),
                 what="sshd to log the refused connections' end")
        assert not LOGIN_ATTEMPT.search(ed25519_only.log(mark)), ed25519_only.log(mark)
