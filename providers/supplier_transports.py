"""One interface over the supplier transports: :func:`transmit` sends a purchase order
document to a supplier the way its type says (docs/suppliers.md#the-dispatch-worker).

=================  ====================================================  =================
supplier type      what :func:`transmit` does                            reference
=================  ====================================================  =================
``sysco``          allocate ISA13, write the X12 850, put it in the      the EDI file name
                   supplier's outbound directory over one SFTP session
``costco``         email the order table (HTML + text) over SMTP         the Message-ID
``central_kitchen``  render the order to PDF, store it, email it         the Message-ID
                   attached
=================  ====================================================  =================

Every transport returns a :class:`~providers.suppliers.Transmission` and raises the
classified errors of :mod:`providers.suppliers` (permanent or transient).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from herald.settings import Settings
from providers.pdf import send_central_kitchen_order
from providers.sftp import SftpSettings, sftp_session
from providers.supplier_mail import send_supplier_email
from providers.suppliers import (
    PurchaseOrderDocument,
    SupplierConfigError,
    SupplierType,
    Transmission,
)
from providers.x12 import RedisControlNumbers, write_850

if TYPE_CHECKING:
    import redis

#: Called with the server's host key (an OpenSSH line) when none was recorded yet.
HostKeyRecorder = Callable[[str], object]


class SupplierEndpoint(Protocol):
    """What a transport reads of a supplier (the ``suppliers`` row satisfies it)."""

    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def email(self) -> str | None: ...
    @property
    def cc(self) -> Sequence[str]: ...
    @property
    def sftp(self) -> dict[str, Any] | None: ...


def transmit(document: PurchaseOrderDocument, supplier: SupplierEndpoint, *,
             settings: Settings, redis_client: redis.Redis | None = None,
             on_new_host_key: HostKeyRecorder | None = None) -> Transmission:
    """Send ``document`` to ``supplier`` through its type's transport, exactly once per
    call. ``redis_client`` (the ISA13 counter's home) is required for sysco;
    ``on_new_host_key`` records a sysco server's first key. Raises SupplierConfigError
    for an unknown type, else what the transport raises."""
    try:
        kind = SupplierType(supplier.type)
    except ValueError:
        raise SupplierConfigError(f"no transport for supplier type {supplier.type!r}") from None
    if kind is SupplierType.SYSCO:
        if redis_client is None:
            raise TypeError("the sysco transport needs a Redis client for its control numbers")
        return send_sysco_order(document, supplier, settings=settings,
                                redis_client=redis_client, on_new_host_key=on_new_host_key)
    if kind is SupplierType.COSTCO:
        return send_supplier_email(document, to=supplier.email, cc=list(supplier.cc),
                                   supplier_name=supplier.name, settings=settings)
    return send_central_kitchen_order(document, to=supplier.email, cc=list(supplier.cc),
                                      supplier_name=supplier.name, settings=settings)


def send_sysco_order(document: PurchaseOrderDocument, supplier: SupplierEndpoint, *,
                     settings: Settings, redis_client: redis.Redis,
                     on_new_host_key: HostKeyRecorder | None = None) -> Transmission:
    """Write ``document`` as an X12 850 under a freshly allocated ISA13 and put it in the
    supplier's outbound directory (created when missing) over one SFTP session, closed
    however it ends. The settings and the document are checked before a connection is
    opened. Returns the file name as reference, with ``remotePath``, ``segmentCount``,
    ``lineCount`` and ``controlNumbers`` for the audit."""
    sftp = SftpSettings.from_mapping(supplier.sftp)
    control_number = RedisControlNumbers(redis_client, settings.queue_prefix).allocate()
    edi = write_850(document, sender_id=settings.x12_sender_id,
                    receiver_id=settings.x12_receiver_id, control_number=control_number,
                    usage=settings.x12_usage, now=datetime.now(UTC))
    with sftp_session(sftp, on_new_host_key=on_new_host_key,
                      operation_timeout=settings.sftp_operation_timeout_s) as session:
        path = session.put(sftp.outbound_dir, edi.file_name, edi.text.encode("utf-8"))
    return Transmission(reference=edi.file_name, audit={"remotePath": path, **edi.audit()})
