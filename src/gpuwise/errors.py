"""User-facing errors.

Anything the user can cause (an unknown name, a malformed config, an impossible number, options that
conflict) raises a subclass of `GpuwiseError` with a one-line message that says what is wrong and
what would be valid. The CLI prints that line on stderr and exits with status 2; a traceback means a
bug in gpuwise, never bad input.
"""

from __future__ import annotations


class GpuwiseError(ValueError):
    """Base class: a problem with the user's input, explained in one line."""

    def __init__(self, message: str) -> None:
        # Keep messages to one line so that the CLI contract (one line on stderr) holds.
        super().__init__(" ".join(str(message).split()))


class UnknownModelError(GpuwiseError):
    """A model name, id or path that gpuwise cannot resolve."""


class UnknownGPUError(GpuwiseError):
    """A GPU name that is not in the catalog."""


class ConfigError(GpuwiseError):
    """A config.json that is malformed or describes an unsupported architecture."""


class InvalidArgument(GpuwiseError):
    """An impossible number or conflicting options."""


class UnknownFormatError(GpuwiseError):
    """A dtype or quantization format name that gpuwise does not know."""


MAX_TOKENS = 1 << 24
"""Upper bound of every token count the user types (--seq, --global-batch, --max-num-batched-tokens, ...): 16M
tokens, beyond any model's context and any batch run today; larger is a typo, not a job."""

MAX_TRAIN_TOKENS = 1e16
"""Upper bound of --train-tokens: 10 quadrillion, ~250x today's largest pretraining runs."""


def require_positive_int(flag: str, value: object, maximum: int) -> None:
    """InvalidArgument unless `value` is a whole number in [1, maximum] (`flag` names it as the CLI does)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{flag} must be a whole number, got {value!r}")
    if value < 1:
        raise InvalidArgument(f"{flag} must be at least 1, got {value}")
    if value > maximum:
        raise InvalidArgument(f"{flag} {value} is absurdly large (maximum {maximum:,})")


def require_positive_number(flag: str, value: object, maximum: float) -> None:
    """InvalidArgument unless `value` is a real number in (0, maximum]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= maximum:
        raise InvalidArgument(f"{flag} must be a positive number up to {maximum:g}, got {value!r}")


def require_train_tokens(value: object) -> None:
    """InvalidArgument unless --train-tokens is a number of tokens in [1, MAX_TRAIN_TOKENS]."""
    require_positive_number("--train-tokens", value, MAX_TRAIN_TOKENS)
    if value < 1:  # type: ignore[operator]  # a real number, checked above
        raise InvalidArgument(f"--train-tokens {value:g}: a run trains on at least one token")


def suggest(name: str, candidates: list[str], n: int = 3) -> str:
    """' Did you mean: a, b?' for the closest candidates, or '' when none is close."""
    import difflib  # local: only needed on the error path

    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
    if not close:
        # Substring matches catch "h100" -> "h100-sxm", "h100-pcie".
        close = [k for k in lowered if name.lower() in k][:n]
    if not close:
        return ""
    return " Did you mean: " + ", ".join(lowered[c] for c in close) + "?"
