"""What an order's notifications cost the worker, piece by piece: the eSIM QR code, the
eSIM email, its SMS, the receipt; beside an ordinary email.

``python -m bench.qr [--samples N] [--deliveries]``. In this process, one at a time, each
piece over N different activation codes shaped like the mock eSIM provider's (default
200); the median CPU ms of each is printed:

- the QR code as qrcode and Pillow made it before (``QRCode.make``, then its Pillow image
  saved as PNG), each half alone;
- the QR code now: its modules (:func:`actors.qr_code.qr_modules`) and the whole PNG
  (:func:`actors.esim_qr.qr_png`);
- :func:`actors.render.render` of the ``esim.ready`` email (its QR code included) and SMS,
  of the ``payment.receipt`` email, and of the ``account.welcome`` email (an ordinary
  delivery's render).

``--deliveries`` adds whole delivery attempts (claim → rendered → mock provider → sent,
:func:`actors.notifications.deliver`) of each kind on PostgreSQL + Redis (``$DATABASE_URL``
/ ``$REDIS_URL`` or private servers, as :mod:`bench.e2e` sets them up, its tables
truncated): CPU ms (median) and database statements per attempt. Appends to
``bench/results.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import publish

#: The account every render is for.
ACCOUNT = {"locale": "en"}


def activation_codes(samples: int) -> list[str]:
    """``samples`` distinct LPA activation codes as the mock eSIM provider makes them."""
    from providers.esim_mock import SMDP_ADDRESS

    return [f"LPA:1${SMDP_ADDRESS}$" + hashlib.sha256(f"code-{n}".encode()).hexdigest()[:16]
            .upper() for n in range(samples)]


def esim_data(code: str) -> dict[str, Any]:
    return {"iccid": "8999" + hashlib.sha256(code.encode()).hexdigest()[:15].translate(
        str.maketrans("abcdef", "012345")), "activation_code": code, "plan_name": "Mock OK"}


def receipt_data(n: int) -> dict[str, Any]:
    return {"amount": "5.00", "currency": "USD", "order_id": str(uuid.UUID(int=n)),
            "payment_method": "mock", "paid_at": "2026-12-05T08:00:00+00:00"}


def median_ms(run: Callable[[Any], object], items: list[Any]) -> float:
    """The median CPU ms of ``run`` over ``items``, one call each."""
    spent = []
    for item in items:
        start = time.process_time()
        run(item)
        spent.append(1000 * (time.process_time() - start))
    return statistics.median(spent)


def _qrcode_before(code: str) -> Any:
    """The QR code's modules as :mod:`actors.esim_qr` computed them before."""
    import qrcode

    from actors.esim_qr import QR_BORDER, QR_BOX_SIZE, QR_ERROR_CORRECTION

    made = qrcode.QRCode(error_correction=QR_ERROR_CORRECTION, box_size=QR_BOX_SIZE,
                         border=QR_BORDER)
    made.add_data(code)
    made.make(fit=True)
    return made


def _pillow_png_before(made: Any) -> bytes:
    """The PNG as :mod:`actors.esim_qr` wrote it before: qrcode's Pillow image, saved."""
    from qrcode.image.pil import PilImage

    buffer = io.BytesIO()
    made.make_image(image_factory=PilImage).save(buffer, format="PNG")
    return buffer.getvalue()


def pieces(samples: int) -> dict[str, float]:
    """The median CPU ms of each piece, in process (see the module's docstring)."""
    from actors.esim_qr import QR_ERROR_CORRECTION, qr_png
    from actors.qr_code import qr_modules
    from actors.render import render

    codes = activation_codes(samples)
    # the first QR code and render of each kind imports and loads what later ones reuse
    render("esim.ready", "email", "en", esim_data(codes[0]), ACCOUNT)
    render("account.welcome", "email", "en", {}, ACCOUNT)
    made = [_qrcode_before(code) for code in codes]
    return {
        "QR code before: modules (qrcode's QRCode.make)": median_ms(_qrcode_before, codes),
        "QR code before: PNG (qrcode's Pillow image, saved)": median_ms(_pillow_png_before,
                                                                        made),
        "QR code now: modules (actors.qr_code.qr_modules)":
            median_ms(lambda code: qr_modules(code, QR_ERROR_CORRECTION), codes),
        "QR code now: modules and PNG (actors.esim_qr.qr_png)": median_ms(qr_png, codes),
        "render: esim.ready email (its QR code included)": median_ms(
            lambda code: render("esim.ready", "email", "en", esim_data(code), ACCOUNT), codes),
        "render: esim.ready sms": median_ms(
            lambda code: render("esim.ready", "sms", "en", esim_data(code), ACCOUNT), codes),
        "render: payment.receipt email": median_ms(
            lambda n: render("payment.receipt", "email", "en", receipt_data(n), ACCOUNT),
            list(range(samples))),
        "render: account.welcome email (an ordinary one)": median_ms(
            lambda _: render("account.welcome", "email", "en", {}, ACCOUNT), codes),
    }


#: The delivery kinds ``--deliveries`` measures: label → (type, channel).
KINDS = {"esim.ready email": ("esim.ready", "email"), "esim.ready sms": ("esim.ready", "sms"),
         "payment.receipt email": ("payment.receipt", "email"),
         "account.welcome email (an ordinary one)": ("account.welcome", "email")}


def deliveries(samples: int) -> dict[str, tuple[float, float]]:
    """CPU ms (median) and database statements per delivery attempt of each kind, in
    process, one at a time, on PostgreSQL + Redis with the mock provider."""
    from actors.notifications import DeliveryJob, deliver
    from actors.orchestration import flush_handoff_stamps, trigger_event
    from bench.e2e import _accounts, _Counter, _reset_tables

    _reset_tables()
    accounts = _accounts()
    codes = activation_codes(samples)
    run = uuid.uuid4().hex[:8]
    jobs: dict[str, list[DeliveryJob]] = {label: [] for label in KINDS}
    for n in range(samples):
        events = {"esim.ready": esim_data(codes[n]), "payment.receipt": receipt_data(n),
                  "account.welcome": {}}
        for event_type, data in events.items():
            result = trigger_event(account_id=accounts[n % len(accounts)], type=event_type,
                                   occurrence=f"{run}-{n}", data=data)
            for delivery in result.deliveries:
                label = next((label for label, kind in KINDS.items()
                              if kind == (event_type, delivery.channel)), None)
                if label is not None:
                    jobs[label].append(DeliveryJob(
                        delivery_id=delivery.id, notification_id=delivery.notification_id,
                        channel=delivery.channel))
    flush_handoff_stamps()
    # one attempt of each kind first: the imports, templates and prepared statements
    for label in KINDS:
        deliver(jobs[label].pop())
    costs = {}
    for label, kind_jobs in jobs.items():
        with _Counter() as counted:
            cpu_ms = median_ms(deliver, kind_jobs)
        costs[label] = (cpu_ms, counted.statements / len(kind_jobs))
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--deliveries", action="store_true",
                        help="also whole delivery attempts on PostgreSQL + Redis")
    args = parser.parse_args()
    import logging

    logging.disable(logging.INFO)
    lines = ["", "The eSIM QR code and an order's notifications "
             f"({time.strftime('%Y-%m-%d %H:%M')}, in process, one at a time; median CPU ms "
             f"of {args.samples}):", "",
             "| piece | CPU ms |", "|---|---|"]
    lines += [f"| {name} | {ms:.3f} |" for name, ms in pieces(args.samples).items()]
    if args.deliveries:
        from bench.e2e import _configure, _services

        env, started = _services()
        try:
            _configure({**env, "QUEUE_PREFIX": f"qr{uuid.uuid4().hex[:6]}", "BROKER": "redis",
                        "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                        "LOG_LEVEL": "WARNING"})
            attempts = deliveries(args.samples)
        finally:
            for service in started:
                service.stop()
        lines += ["", "| delivery attempt (claim → sent, mock provider) | CPU ms | "
                  "database statements |", "|---|---|---|"]
        lines += [f"| {label} | {ms:.3f} | {statements:.1f} |"
                  for label, (ms, statements) in attempts.items()]
    publish(lines)


if __name__ == "__main__":
    main()
