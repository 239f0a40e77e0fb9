"""The payment path, pure: curio signs every ask and every completion through the Lotus API
(lib/proofsvc/sigs.go:211-242, ``WalletSign``), so a token that cannot sign, or a node that
does not hold the wallet, means proofs that are never asked for or never paid, whatever the
workers do. That is the fleet's configuration, not a machine's: provisioning pauses with the
cause named (the fleet-wide failure's pause, signature ``payment_path``), nobody is struck,
and the pause lifts by itself once the cluster shows a signature going through again (a
request obtained, which took a signed ask, or a completion submitted) or by ``vastui resume``.
"""

from __future__ import annotations

from dataclasses import dataclass

SIGNATURE = "payment_path"


@dataclass(frozen=True, slots=True)
class Signing:
    """What the cluster's last reading says of signing (vastui/engine/cluster.py Totals)."""

    refused: int  # signatures refused in the window
    error: str | None  # the last refusal's words
    refused_at: float | None
    signed_at: float | None  # the last sign that one went through


def broken(s: Signing) -> str | None:
    """One line naming the cause when signing is refused and has not worked since; else None."""
    if s.refused <= 0 or s.refused_at is None:
        return None
    if s.signed_at is not None and s.signed_at > s.refused_at:
        return None
    return (
        "the payment path: curio cannot sign asks or completions through the Lotus API "
        f"({s.error or 'signature refused'}); give curio's [Apis] ChainApiInfo a token that "
        "allows sign, from a node that holds the provider's wallet"
    )


def mended(s: Signing, paused_since: float) -> bool:
    """A pause for the payment path is over: a signature went through after it began."""
    return s.signed_at is not None and s.signed_at > paused_since


__all__ = ["SIGNATURE", "Signing", "broken", "mended"]
