"""Suppliers' acknowledgments on demand and an operator's reroute (docs/api.md,
"Purchasing"): ``POST /v1/inbound/sysco`` reprocesses one inbound EDI file,
``POST /admin/backorders/{lineItemId}/reroute`` reroutes a back-ordered line. The work is
in ``actors.sysco_inbound`` and ``actors.backorder_reroute``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actors import backorder_reroute, sysco_inbound
from herald.text import SingleLine
from herald.web.auth import admin_router, protected_router
from herald.web.errors import api_error

router = protected_router(["suppliers"])
admin = admin_router(["suppliers"])

#: The largest inbound file accepted (characters); Sysco's acknowledgments are a few KB.
MAX_EDI_CHARS = 1_000_000


class InboundFileIn(BaseModel):
    """One inbound file of a Sysco supplier: its name on the server and its text."""

    model_config = ConfigDict(extra="forbid")
    supplier_id: SingleLine = Field(min_length=1, max_length=36)
    #: The file's name, as the poll would have read it (the document's reference).
    filename: SingleLine = Field(min_length=1, max_length=255, pattern=r"^[^/]+$")
    #: The file as it is: not free text but an interchange, which the X12 parser judges
    #: (its separators may be any character, control characters included).
    content: str = Field(min_length=1, max_length=MAX_EDI_CHARS)


class RerouteIn(BaseModel):
    """An operator's reroute: optionally the supplier to move the line to, and why."""

    model_config = ConfigDict(extra="forbid")
    alternate_supplier_id: SingleLine | None = Field(default=None, min_length=1,
                                                     max_length=36)
    reason: SingleLine | None = Field(default=None, max_length=500)


@router.post("/inbound/sysco", summary="Process one inbound EDI file of a Sysco supplier")
def process_sysco_file(body: InboundFileIn) -> dict[str, Any]:
    """What processing did: ``status`` ``processed`` (with its documents and the reroutes
    it enqueued), ``alreadyProcessed`` (this supplier's file of that name was applied
    before) or ``notParsed`` (with the parser's ``error``; nothing was written)."""
    try:
        return sysco_inbound.process_inbound_edi(body.content, supplier_id=body.supplier_id,
                                                 reference=body.filename)
    except sysco_inbound.UnknownSupplier as error:
        raise api_error(404, "supplier_not_found", str(error)) from None


@admin.post("/backorders/{line_item_id}/reroute", status_code=202,
            summary="Reroute a back-ordered line to an alternate supplier")
def reroute_line(line_item_id: str, body: RerouteIn | None = None) -> dict[str, Any]:
    """The reroute job's enqueue status (``added``, or ``deduplicated`` while a reroute
    of the same back-order is live) and id; the worker picks the alternate unless the
    body names one. 404 for an unknown line, 409 for a line that is not back-ordered."""
    request = body or RerouteIn()
    try:
        result = backorder_reroute.request_reroute(
            line_item_id, alternate_supplier_id=request.alternate_supplier_id,
            reason=request.reason)
    except backorder_reroute.LineNotFound as error:
        raise api_error(404, "line_not_found", str(error)) from None
    except backorder_reroute.NotBackordered as error:
        raise api_error(409, "not_backordered", str(error)) from None
    except ValidationError as error:
        raise api_error(422, "validation_error",
                        "; ".join(str(e["msg"]) for e in error.errors())) from None
    return {"status": result.status, "jobId": result.job_id, "lineItemId": line_item_id}
