"""``herald secrets rotate``: every secret herald stores sealed under SECRETS_KEY's newest
key (docs/configuration.md#secrets_key)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from herald.commands.shared import fail

if TYPE_CHECKING:
    from herald.settings import Settings


def cmd_secrets(args: argparse.Namespace, settings: Settings) -> int:
    """``herald secrets rotate``: seal every secret stored in clear and re-seal every one
    the newest key does not open, in one transaction; prints the counts per kind. Run it
    again and it changes nothing. Exit code 1, and nothing changed, without a key or
    when a stored secret opens with none of the keys."""
    from herald import db
    from herald.secrets_box import SecretsKeyMissing, SecretUnreadable, current_box
    from models.sealed import reseal_all

    box = current_box(settings)
    if box is None:
        return fail(str(SecretsKeyMissing()))
    try:
        with db.get_engine().begin() as connection:
            done = reseal_all(connection, box)
    except SecretUnreadable as error:
        return fail(f"{error}; nothing was changed")
    for kind, counts in done.items():
        print(f"{kind}: {counts.encrypted} encrypted (were in clear), {counts.reencrypted} "
              f"re-encrypted with the newest key, {counts.current} already current")
    return 0
