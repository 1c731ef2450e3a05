"""The filters notification templates use: ``money`` and ``http_url``.

``{{ data.amount|money(data.currency) }}`` shows an amount with its currency's usual number
of decimals; ``{{ data.url|http_url }}`` links only an http(s) URL. :mod:`actors.render`
installs both in its Jinja2 environment.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

#: Digits after the decimal point for currencies that do not use two (ISO 4217).
_CURRENCY_DECIMALS = {
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    "CLP": 0, "ISK": 0, "JPY": 0, "KRW": 0, "UGX": 0, "VND": 0, "XAF": 0, "XOF": 0,
}


def format_money(amount: Any, currency: Any) -> str:
    """``12.5, "sar"`` → ``"12.50 SAR"``; an amount that is not a number is shown as given."""
    code = str(currency).strip().upper()
    if isinstance(amount, bool):
        return f"{amount} {code}"
    try:
        value = Decimal(str(amount).strip())
    except (InvalidOperation, ValueError):
        return f"{amount} {code}"
    if not value.is_finite():
        return f"{amount} {code}"
    places = _CURRENCY_DECIMALS.get(code, 2)
    return f"{value:,.{places}f} {code}"


def http_url(value: Any) -> str:
    """``value`` when it is an http(s) URL, else ``""``: templates link nothing else."""
    url = str(value).strip()
    return url if url.lower().startswith(("https://", "http://")) else ""
