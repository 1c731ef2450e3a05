"""The currencies herald knows: the ISO 4217 codes of money in circulation (funds codes
such as ``BOV`` included; precious metals, ``XDR`` and the testing and "no currency"
codes ``XTS``/``XXX`` left out). Event data that names a currency is checked against it
(``payment.receipt``'s ``currency``)."""

from __future__ import annotations

# Codes withdrawn recently (SLL, ZWL, ANG) stay while payments in them may still be reported.
_CODES = """
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN
BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN
ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD
JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT
MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG
QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS
TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XCD XCG
XOF XPF YER ZAR ZMW ZWG ZWL
"""
#: The ISO 4217 alphabetic codes herald accepts, upper case.
ISO_4217: frozenset[str] = frozenset(_CODES.split())

#: What a refused currency is told (no value quoted: event data is personal data).
UNKNOWN_CURRENCY = ('not an ISO 4217 currency code herald knows; send the three-letter '
                    'code, like "SAR", "EUR" or "USD"')


def known_currency(code: str) -> str:
    """``code`` in upper case when it is one of :data:`ISO_4217` (any case given);
    ValueError with :data:`UNKNOWN_CURRENCY` otherwise."""
    upper = code.upper()
    if upper not in ISO_4217:
        raise ValueError(UNKNOWN_CURRENCY)
    return upper
