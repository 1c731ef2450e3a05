"""Rendering notifications: the catalogue, its templates, locales and the eSIM QR code.

Pure unit tests: templates come from the repository's ``templates/`` directory and no
service is needed. Each test reads as a story: given some event data, when it is
rendered (or validated), then the message looks the way a customer should see it.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import re
from typing import Any

import jinja2
import pytest
import qrcode
from PIL import Image

import actors.render as render_module
from actors.esim_qr import QR_BORDER, QR_BOX_SIZE, QR_CONTENT_ID, QR_ERROR_CORRECTION, qr_png
from actors.event_catalogue import (
    EVENT_TYPES,
    EventType,
    InvalidEventData,
    UnknownEventType,
    event_type,
    validate_event_data,
    validate_message_data,
)
from actors.locales import DEFAULT_LOCALE, SUPPORTED_LOCALES, resolve_locale
from actors.render import SMS_MAX_CHARS, TEMPLATES_DIR, Rendered, RenderError, render
from herald.queue import Permanent

ARABIC = re.compile(r"[\u0600-\u06FF]")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ACTIVATION_CODE = "LPA:1$smdp.example.com$ABC-123"

#: Data with every required key of each type (optional keys left out).
MINIMAL_DATA: dict[str, dict[str, Any]] = {
    "account.welcome": {},
    "payment.receipt": {"amount": "49.00", "currency": "SAR", "order_id": "ORD-1001"},
    "esim.ready": {"iccid": "8966012345678901234", "activation_code": ACTIVATION_CODE},
    "promo.offer": {"headline": "20% off every plan", "code": "SAVE20"},
    # a digested type's message carries its events (docs/api.md#digests)
    "account.activity": {"events": [{"occurrence": "login-1", "data": {"text": "New sign-in"},
                                     "at": "2024-05-01T09:00:00+00:00"}], "shown": 50},
}

#: Data with every optional key too.
FULL_DATA: dict[str, dict[str, Any]] = {
    "account.welcome": {"get_started_url": "https://app.example.com/start"},
    "payment.receipt": {
        **MINIMAL_DATA["payment.receipt"], "description": "Europe 10 GB",
        "paid_at": "2024-05-01", "payment_method": "Visa 4242",
        "receipt_url": "https://app.example.com/receipts/ORD-1001",
    },
    "esim.ready": {**MINIMAL_DATA["esim.ready"], "plan_name": "Europe 10 GB"},
    "promo.offer": {
        **MINIMAL_DATA["promo.offer"], "body": "Travel more for less.",
        "valid_until": "2024-06-30", "url": "https://app.example.com/shop",
        "unsubscribe_url": "https://app.example.com/unsubscribe",
    },
    "account.activity": {"events": [
        {"occurrence": f"login-{n}", "at": "2024-05-01T09:00:00+00:00",
         "data": {"text": f"New sign-in {n}", "url": "https://app.example.com/activity"}}
        for n in range(3)], "shown": 2},
}

ACCOUNT = {"locale": "en", "display_name": "Sara"}

CASES = [
    pytest.param(name, channel, locale, id=f"{name}-{channel}-{locale}")
    for name, spec in EVENT_TYPES.items()
    for channel in spec.channels
    for locale in SUPPORTED_LOCALES
]


def all_text(message: Rendered) -> str:
    return "\n".join(part for part in (message.subject, message.text, message.html) if part)


# --- the catalogue ---------------------------------------------------------------------


def test_the_catalogue_ships_the_four_event_types_of_the_spec() -> None:
    # Given the catalogue / Then it matches docs/pipeline.md#event-types, type by type
    assert {name: (spec.channels, spec.transactional, spec.required_data)
            for name, spec in EVENT_TYPES.items()} == {
        "account.welcome": (("email", "sms", "in_app"), True, ()),
        "payment.receipt": (("email",), True, ("amount", "currency", "order_id")),
        "esim.ready": (("email", "sms"), True, ("iccid", "activation_code")),
        "promo.offer": (("email", "sms"), False, ("headline", "code")),
        "account.activity": (("email", "in_app"), False, ("text",)),
    }
    assert "plan_name" in EVENT_TYPES["esim.ready"].optional_data
    assert DEFAULT_LOCALE == "en"
    assert SUPPORTED_LOCALES == ("en", "ar")


def test_event_type_returns_the_catalogue_entry() -> None:
    # When a known type is looked up / Then its entry comes back
    spec = event_type("promo.offer")
    assert isinstance(spec, EventType)
    assert spec is EVENT_TYPES["promo.offer"]


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
@pytest.mark.parametrize("locale", SUPPORTED_LOCALES)
def test_every_type_has_exactly_the_template_files_of_its_channels(name: str,
                                                                   locale: str) -> None:
    # Given a type's channels
    files = {"email": {"email_subject.txt", "email.html", "email.txt"},
             "sms": {"sms.txt"}, "in_app": {"in_app.txt"}}
    expected = set().union(*(files[channel] for channel in EVENT_TYPES[name].channels))
    # When its locale directory is listed
    directory = TEMPLATES_DIR / "notifications" / name / locale
    # Then it holds the templates of those channels, no more and no fewer
    assert {path.name for path in directory.iterdir()} == expected


# --- every type x channel x locale renders ---------------------------------------------


@pytest.mark.parametrize(("name", "channel", "locale"), CASES)
@pytest.mark.parametrize("data_set", [MINIMAL_DATA, FULL_DATA], ids=["minimal", "full"])
def test_every_type_renders_on_each_of_its_channels_in_each_locale(
    name: str, channel: str, locale: str, data_set: dict[str, dict[str, Any]]
) -> None:
    # Given event data (with or without its optional keys) and an account
    data = data_set[name]
    # When the event is rendered for one of its channels
    message = render(name, channel, locale, data, {"locale": locale})
    # Then the message is complete for that channel, in that locale
    assert message.channel == channel
    assert message.locale == locale
    assert message.text and message.text == message.text.strip()
    assert "None" not in message.text
    if channel == "email":
        assert message.subject and "\n" not in message.subject
        assert message.subject == message.subject.strip()
        assert message.html is not None
        assert message.html.lstrip().startswith("<!DOCTYPE html>")
        assert f'<html lang="{locale}"' in message.html
        assert "None" not in message.html
    else:
        assert message.subject is None and message.html is None
    if channel == "sms":
        assert len(message.text) <= SMS_MAX_CHARS


@pytest.mark.parametrize(("name", "channel", "locale"), CASES)
def test_required_data_shows_up_in_the_message(name: str, channel: str, locale: str) -> None:
    # Given the data a type requires
    data = MINIMAL_DATA[name]
    # When it is rendered
    message = render(name, channel, locale, data)
    if EVENT_TYPES[name].digest is not None:  # a digest's message: its newest event's
        data = data["events"][-1]["data"]
    # Then every required value (except the LPA string itself, which the QR code carries
    # in the HTML) is visible to the reader in the text
    for key in EVENT_TYPES[name].required_data:
        if name == "esim.ready" and channel == "email" and key == "activation_code":
            assert "ABC-123" in message.text and "smdp.example.com" in message.text
        elif key == "amount":
            assert "49.00" in message.text
        elif name == "esim.ready" and channel == "sms" and key == "iccid":
            continue  # the SMS carries the activation code, not the card number
        else:
            assert str(data[key]) in message.text


@pytest.mark.parametrize(("name", "channel"),
                         [(n, c) for n, s in EVENT_TYPES.items() for c in s.channels])
def test_arabic_messages_are_in_arabic_and_right_to_left(name: str, channel: str) -> None:
    # Given an Arabic-speaking account
    account = {"locale": "ar", "display_name": "سارة"}
    # When the event is rendered in Arabic
    message = render(name, channel, "ar", FULL_DATA[name], account)
    # Then the text is Arabic and the HTML reads right to left
    assert message.locale == "ar"
    assert ARABIC.search(message.text)
    if channel == "email":
        assert message.subject is not None and ARABIC.search(message.subject)
        assert message.html is not None
        assert '<html lang="ar" dir="rtl">' in message.html
        assert "text-align:right" in message.html
        assert 'dir="ltr"' not in message.html.split("<body", 1)[0]


@pytest.mark.parametrize(("name", "channel"),
                         [(n, c) for n, s in EVENT_TYPES.items() for c in s.channels])
def test_english_messages_are_left_to_right_and_free_of_arabic(name: str, channel: str) -> None:
    # Given English-language data / When it is rendered in English
    message = render(name, channel, "en", FULL_DATA[name], ACCOUNT)
    # Then nothing in it is Arabic and the HTML reads left to right
    assert not ARABIC.search(all_text(message))
    if message.html is not None:
        assert '<html lang="en" dir="ltr">' in message.html


def test_the_display_name_greets_the_reader_when_the_account_has_one() -> None:
    # Given an account with a display name, and one without
    # When the welcome email is rendered for each
    named = render("account.welcome", "email", "en", {}, ACCOUNT)
    anonymous = render("account.welcome", "email", "en", {}, {"locale": "en"})
    # Then the first greets by name and the second still reads naturally
    assert "Sara" in named.subject and named.text.startswith("Hi Sara,")
    assert anonymous.text.startswith("Hi,")
    assert "Sara" not in all_text(anonymous)


def test_optional_data_appears_only_when_given() -> None:
    # Given an eSIM with a plan name and one without
    with_plan = render("esim.ready", "sms", "en", FULL_DATA["esim.ready"])
    without_plan = render("esim.ready", "sms", "en", MINIMAL_DATA["esim.ready"])
    # Then the plan name shows up only in the first
    assert "Europe 10 GB" in with_plan.text
    assert "Europe 10 GB" not in without_plan.text
    assert without_plan.text.startswith("Your eSIM is ready.")


def test_a_receipt_shows_the_amount_with_the_currency_s_decimals() -> None:
    # Given amounts as numbers or strings, in two- and three-decimal currencies
    cases = [(12.5, "sar", "12.50 SAR"), ("1234.5", "KWD", "1,234.500 KWD"),
             (1000, "JPY", "1,000 JPY")]
    for amount, currency, shown in cases:
        data = {"amount": amount, "currency": currency, "order_id": "O-1"}
        # When the receipt is rendered
        message = render("payment.receipt", "email", "en", data)
        # Then the total is formatted for that currency
        assert f"Total paid: {shown}" in message.text


def test_promo_messages_carry_an_opt_out() -> None:
    # Given a marketing event / When its email and SMS are rendered
    email = render("promo.offer", "email", "en", FULL_DATA["promo.offer"])
    sms = render("promo.offer", "sms", "en", FULL_DATA["promo.offer"])
    # Then both tell the reader how to stop them
    assert EVENT_TYPES["promo.offer"].transactional is False
    assert "https://app.example.com/unsubscribe" in (email.html or "")
    assert "Unsubscribe" in email.text
    assert "STOP" in sms.text


# --- locale fallback -------------------------------------------------------------------


@pytest.mark.parametrize(("requested", "used"), [
    ("en", "en"), ("ar", "ar"), ("ar-SA", "ar"), ("ar_EG", "ar"), ("AR", "ar"),
    ("en_GB", "en"), ("en-US", "en"), ("fr", "en"), ("fr-FR", "en"), ("zz", "en"),
    ("", "en"), (None, "en"), ("  ar-sa  ", "ar"),
])
def test_a_locale_falls_back_to_its_base_language_then_english(requested: str | None,
                                                                used: str) -> None:
    # Given a requested locale / When a message is rendered in it
    message = render("account.welcome", "in_app", requested, {})
    # Then the closest supported locale is used, and reported
    assert message.locale == used
    assert resolve_locale(requested) == used
    assert bool(ARABIC.search(message.text)) == (used == "ar")


def test_without_a_locale_the_account_s_locale_is_used() -> None:
    # Given an Arabic account and no explicit locale
    account = {"locale": "ar-SA"}
    # When the event is rendered
    implicit = render("account.welcome", "sms", None, {}, account)
    explicit = render("account.welcome", "sms", "en", {}, account)
    # Then the account's locale applies, unless the caller names one
    assert implicit.locale == "ar"
    assert explicit.locale == "en"


# --- the eSIM QR code ------------------------------------------------------------------


def decode_qr(png: bytes) -> str | None:
    """The text of a QR code image with whichever decoder is installed; None without one."""
    image = Image.open(io.BytesIO(png)).convert("L")
    if importlib.util.find_spec("zxingcpp"):
        import zxingcpp
        return zxingcpp.read_barcode(image).text
    if importlib.util.find_spec("pyzbar"):
        from pyzbar.pyzbar import decode
        return decode(image)[0].data.decode()
    if importlib.util.find_spec("cv2"):
        import cv2
        import numpy
        text, _, _ = cv2.QRCodeDetector().detectAndDecode(numpy.array(image))
        return text
    return None


def qr_matrix(text: str) -> list[list[bool]]:
    code = qrcode.QRCode(error_correction=QR_ERROR_CORRECTION, box_size=QR_BOX_SIZE,
                         border=QR_BORDER)
    code.add_data(text)
    code.make(fit=True)
    return code.get_matrix()


def test_the_esim_email_attaches_the_qr_code_and_shows_it_inline() -> None:
    # Given a ready eSIM
    data = FULL_DATA["esim.ready"]
    # When its email is rendered
    message = render("esim.ready", "email", "en", data)
    # Then one PNG is attached under the content id the HTML points at
    assert len(message.attachments) == 1
    qr = message.attachments[0]
    assert (qr.filename, qr.content_type, qr.content_id) == ("esim-qr.png", "image/png",
                                                             QR_CONTENT_ID)
    assert '<img src="cid:esim-qr"' in (message.html or "")
    assert qr.data.startswith(PNG_SIGNATURE)


def test_the_qr_code_encodes_the_activation_code() -> None:
    # Given a ready eSIM / When its email is rendered
    png = render("esim.ready", "email", "ar", MINIMAL_DATA["esim.ready"]).attachments[0].data
    image = Image.open(io.BytesIO(png))
    # Then the PNG is a square QR code whose modules are those of the activation code
    matrix = qr_matrix(ACTIVATION_CODE)
    side = len(matrix) * QR_BOX_SIZE
    assert image.format == "PNG"
    assert image.size == (side, side)
    pixels = image.convert("L")
    sampled = [[pixels.getpixel((x * QR_BOX_SIZE + QR_BOX_SIZE // 2,
                                 y * QR_BOX_SIZE + QR_BOX_SIZE // 2)) < 128
                for x in range(len(matrix))] for y in range(len(matrix))]
    assert sampled == matrix
    # And a QR decoder, when one is installed, reads the activation code back
    decoded = decode_qr(png)
    if decoded is not None:
        assert decoded == ACTIVATION_CODE


def test_the_same_code_gives_the_same_image_and_another_code_another() -> None:
    # Given two renders of one eSIM and one of another
    first = render("esim.ready", "email", "en", MINIMAL_DATA["esim.ready"])
    second = render("esim.ready", "email", "ar", MINIMAL_DATA["esim.ready"])
    other_code = "LPA:1$smdp.example.com$XYZ-9"
    other = render("esim.ready", "email", "en",
                   {**MINIMAL_DATA["esim.ready"], "activation_code": other_code})
    # Then the QR image depends on the activation code only
    assert first.attachments[0].data == second.attachments[0].data == qr_png(ACTIVATION_CODE)
    assert other.attachments[0].data != first.attachments[0].data


@pytest.mark.parametrize(("name", "channel"), [
    ("account.welcome", "email"), ("account.welcome", "sms"), ("account.welcome", "in_app"),
    ("payment.receipt", "email"), ("esim.ready", "sms"), ("promo.offer", "email"),
    ("promo.offer", "sms"),
])
def test_other_messages_have_no_attachments(name: str, channel: str) -> None:
    # Given any message but the eSIM email / When it is rendered / Then nothing is attached
    assert render(name, channel, "en", FULL_DATA[name]).attachments == ()


def test_an_activation_code_that_is_not_an_lpa_string_is_shown_whole() -> None:
    # Given an activation code the email cannot split into SM-DP+ address and matching id
    data = {"iccid": "8966012345678901234", "activation_code": "OPAQUE-CODE-42"}
    # When the email is rendered
    message = render("esim.ready", "email", "en", data)
    # Then the whole code is shown for manual entry, and still sent as a QR code
    assert "OPAQUE-CODE-42" in (message.html or "")
    assert "SM-DP+" not in (message.html or "")
    assert message.attachments[0].data == qr_png("OPAQUE-CODE-42")


# --- missing data, unknown types, wrong channels ---------------------------------------


@pytest.mark.parametrize("name", [name for name, spec in EVENT_TYPES.items()
                                  if spec.required_data])
def test_missing_required_data_is_refused_before_anything_is_stored(name: str) -> None:
    # Given event data that lacks every required key
    # When the HTTP layer validates it
    with pytest.raises(ValueError, match="Field required") as caught:
        validate_event_data(name, {})
    # Then the error names each missing key
    assert isinstance(caught.value, InvalidEventData)
    assert caught.value.keys == EVENT_TYPES[name].required_data
    for key in EVENT_TYPES[name].required_data:
        assert key in str(caught.value)


@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_null_or_blank_required_value_is_refused(value: str | None) -> None:
    # Given a receipt whose order id is null or blank
    data = {**MINIMAL_DATA["payment.receipt"], "order_id": value}
    # When it is validated / Then only that key is reported
    with pytest.raises(InvalidEventData) as caught:
        validate_event_data("payment.receipt", data)
    assert caught.value.keys == ("order_id",)


def test_complete_data_validates() -> None:
    # Given complete data / When it is validated as a message's / Then nothing is raised
    for name, data in FULL_DATA.items():
        validate_message_data(name, data)


def test_an_unknown_key_is_refused_by_its_name() -> None:
    # Given an offer whose optional key is misspelt (it would vanish from the message)
    data = {**MINIMAL_DATA["promo.offer"], "valid_untill": "2024-06-30"}
    # When it is validated / Then the misspelt key is named
    with pytest.raises(InvalidEventData, match="valid_untill: Extra inputs") as caught:
        validate_event_data("promo.offer", data)
    assert caught.value.keys == ("valid_untill",)


@pytest.mark.parametrize(("key", "value"), [
    ("amount", [1, 2]), ("amount", float("nan")), ("amount", float("inf")),
    ("amount", -1), ("amount", "12.34567"), ("amount", True), ("amount", "twelve"),
    ("currency", "riyal"), ("order_id", 1001), ("order_id", "x" * 129),
    ("description", "x" * 501), ("receipt_url", "https://e.com/" + "x" * 2048),
])
def test_a_value_of_the_wrong_type_or_size_is_refused_without_repeating_it(key: str,
                                                                            value: Any) -> None:
    # Given a receipt with one value its model does not allow
    data = {**FULL_DATA["payment.receipt"], key: value}
    # When it is validated
    with pytest.raises(InvalidEventData) as caught:
        validate_event_data("payment.receipt", data)
    # Then the key is named and the value is not repeated
    assert caught.value.keys == (key,)
    assert str(value) not in str(caught.value).split(": ", 1)[1]


def test_amounts_in_major_units_as_numbers_or_strings_are_accepted() -> None:
    for amount in (12, 12.5, "12.50", "0", "1234567.891"):
        validate_event_data("payment.receipt", {**MINIMAL_DATA["payment.receipt"],
                                                "amount": amount})


def test_the_catalogue_keys_are_the_data_models_fields() -> None:
    # The catalogue's key lists come from each type's model: one place declares them
    for spec in EVENT_TYPES.values():
        assert set(spec.required_data) | set(spec.optional_data) == set(spec.data.model_fields)
    assert EVENT_TYPES["promo.offer"].optional_data == ("body", "valid_until", "url",
                                                        "unsubscribe_url")


def test_event_data_must_be_an_object() -> None:
    # Given data that is not a mapping / When it is validated / Then it is refused
    with pytest.raises(ValueError, match="must be an object"):
        validate_event_data("account.welcome", ["not", "a", "dict"])  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "channel", "locale"),
                         # a digest's message is its events (tests/digests renders one
                         # whose event lacks its text)
                         [case for case in CASES if EVENT_TYPES[case.values[0]].required_data
                          and EVENT_TYPES[case.values[0]].digest is None])
def test_rendering_without_required_data_is_a_permanent_render_error(name: str, channel: str,
                                                                     locale: str) -> None:
    required = EVENT_TYPES[name].required_data
    # Given data without the type's last required key
    data = {key: value for key, value in MINIMAL_DATA[name].items() if key != required[-1]}
    # When a worker renders it
    with pytest.raises(RenderError, match=required[-1]) as caught:
        render(name, channel, locale, data)
    # Then the failure is permanent for the job
    assert isinstance(caught.value, Permanent)


def test_an_unknown_event_type_is_refused_everywhere() -> None:
    # Given a type the catalogue does not know
    # When it is looked up, validated or rendered / Then UnknownEventType (a ValueError)
    with pytest.raises(UnknownEventType, match=r"order\.shipped"):
        event_type("order.shipped")
    with pytest.raises(ValueError, match="unknown event type"):
        validate_event_data("order.shipped", {})
    with pytest.raises(UnknownEventType):
        render("order.shipped", "email", "en", {})
    with pytest.raises(UnknownEventType):
        render("../../etc", "email", "en", {})


@pytest.mark.parametrize(("name", "channel"), [
    ("payment.receipt", "sms"), ("esim.ready", "in_app"), ("promo.offer", "in_app"),
    ("payment.receipt", "push"), ("account.welcome", "../email"),
])
def test_a_channel_the_type_does_not_have_is_a_render_error(name: str, channel: str) -> None:
    # Given a type and a channel it does not use / When it is rendered / Then RenderError
    with pytest.raises(RenderError, match="channel"):
        render(name, channel, "en", FULL_DATA[name])


# --- escaping, SMS length, errors and logs ---------------------------------------------


@pytest.mark.parametrize(("name", "source"), [("account.welcome", "in_app"),
                                              ("esim.ready", "sms"), ("promo.offer", "sms")])
def test_push_shows_the_in_app_text_else_the_sms_text(name: str, source: str) -> None:
    # Given a type with in-app or SMS templates / When push is rendered
    push = render(name, "push", "en", FULL_DATA[name])
    # Then it is that channel's text, with no subject or HTML
    assert push.text == render(name, source, "en", FULL_DATA[name]).text
    assert (push.subject, push.html, push.attachments) == (None, None, ())


def test_markup_in_data_is_escaped_in_html_but_kept_as_is_in_text() -> None:
    # Given an offer whose headline and code carry markup
    data = {"headline": "<script>alert('x')</script> Sale", "code": "<b>CODE</b>",
            "body": "Fish & chips"}
    for locale in SUPPORTED_LOCALES:
        # When its email is rendered
        message = render("promo.offer", "email", locale, data)
        # Then the HTML shows the markup as text, never as markup
        assert message.html is not None
        assert "<script>" not in message.html and "<b>CODE" not in message.html
        assert "&lt;script&gt;" in message.html
        assert "&lt;b&gt;CODE&lt;/b&gt;" in message.html
        assert "Fish &amp; chips" in message.html
        # And the plain-text parts keep the characters as written
        assert message.subject is not None
        assert message.subject.endswith(": <script>alert('x')</script> Sale")
        assert "<b>CODE</b>" in message.text and "Fish & chips" in message.text


def test_only_http_links_are_linked() -> None:
    # Given an offer whose link is a javascript: URL
    data = {**MINIMAL_DATA["promo.offer"], "url": "javascript:alert(1)"}
    # When it is rendered / Then no button links to it
    message = render("promo.offer", "email", "en", data)
    assert "javascript:" not in (message.html or "") and "javascript:" not in message.text


def test_an_sms_longer_than_the_limit_is_a_render_error() -> None:
    # Given an offer whose headline and link together are longer than an SMS may be
    data = {"headline": "Big sale " * 22, "code": "SAVE20",
            "url": "https://shop.example.com/" + "spring-" * 50}
    # When its SMS is rendered
    with pytest.raises(RenderError) as caught:
        render("promo.offer", "sms", "en", data)
    # Then the error gives the length and the limit, not the text
    assert str(SMS_MAX_CHARS) in str(caught.value)
    assert "Big sale" not in str(caught.value)
    # And the same headline still makes an email
    assert render("promo.offer", "email", "en", data).subject


def _environment_with(template: str) -> jinja2.Environment:
    """A stand-in environment whose welcome in-app template is ``template``."""
    return jinja2.Environment(
        loader=jinja2.DictLoader({"notifications/account.welcome/en/in_app.txt": template}),
        undefined=jinja2.StrictUndefined,
    )


def test_a_template_error_does_not_repeat_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a template that looks a data value up in a table that lacks it
    template = "{{ {'a': 1}[account.display_name] }}"
    monkeypatch.setattr(render_module, "environment", lambda: _environment_with(template))
    # When it is rendered for a named account
    with pytest.raises(RenderError) as caught:
        render("account.welcome", "in_app", "en", {}, {"display_name": "sara@example.com"})
    # Then the error names the template but not the value, and hides the original error
    assert "in_app.txt" in str(caught.value)
    assert "sara@example.com" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_an_optional_key_read_without_a_default_fails_loudly_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a template that reads an optional key without a default filter
    monkeypatch.setattr(render_module, "environment",
                        lambda: _environment_with("Go to {{ data.get_started_url }}"))
    # When the key is absent / Then rendering fails, naming the key
    with pytest.raises(RenderError, match="get_started_url"):
        render("account.welcome", "in_app", "en", {})


def test_rendering_logs_no_personal_data(caplog: pytest.LogCaptureFixture) -> None:
    # Given personal data in an event and its account
    account = {"locale": "en", "display_name": "Sara Al-Harbi"}
    data = {**FULL_DATA["esim.ready"], "iccid": "8966099999999999999"}
    # When every channel renders it, successfully and not
    with caplog.at_level(logging.DEBUG):
        for channel in EVENT_TYPES["esim.ready"].channels:
            render("esim.ready", channel, "en", data, account)
        with pytest.raises(RenderError):
            render("esim.ready", "sms", "en", {"iccid": "8966099999999999999"}, account)
    # Then no log line carries any of it
    logged = "\n".join(record.getMessage() + repr(vars(record)) for record in caplog.records)
    for secret in ("Sara", "8966099999999999999", "ABC-123"):
        assert secret not in logged


def test_the_environment_is_cached_and_configured() -> None:
    # Given the module's environment / Then it is built once, strict and HTML-escaping
    env = render_module.environment()
    assert env is render_module.environment()
    assert env.undefined is jinja2.StrictUndefined
    assert env.trim_blocks and env.lstrip_blocks
    assert env.autoescape("x/email.html") is True  # type: ignore[operator]
    assert env.autoescape("x/email.txt") is False  # type: ignore[operator]
