"""Who an operator command acts as: ``operator:<login>``, the login of the operating-system user
running it, as audit lines, histories and ledger entries record it. Never a name typed on the
command line: a free-text ``--actor`` would let an audit line name anyone."""

from __future__ import annotations

import getpass
import os

__all__ = ["operator_actor", "operator_login"]

MAX_LOGIN = 64


def operator_login() -> str:
    """The login of the user this process runs as: the password database's name of the real
    user id (not $USER or $LOGNAME, which the caller sets), else getpass's answer."""
    try:
        import pwd

        login = pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no pwd (Windows) or a uid without an entry (a container)
        login = getpass.getuser()
    if not login or len(login) > MAX_LOGIN or not login.isprintable() or login != login.strip():
        raise RuntimeError("the operating-system user's login is not a short printable name")
    return login


def operator_actor() -> str:
    """``operator:<login>``: the actor of an operator command."""
    return f"operator:{operator_login()}"
