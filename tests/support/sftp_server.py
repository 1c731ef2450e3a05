"""The in-process SFTP server the supplier tests use: herald.demo.sftp_server's."""

from herald.demo.sftp_server import SftpTestServer, start_sftp_server

__all__ = ["SftpTestServer", "start_sftp_server"]
