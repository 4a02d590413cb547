"""The verl release this project is written against, checked when dfpo is imported.

verl changed its policy-loss signature in 0.5, 0.6 and 0.7 and moved the actor to engine workers in
0.8; DFPO plugs into 0.9.1's registries and worker path, so any other version is refused with a
message that says what to install.
"""

from __future__ import annotations

from importlib import metadata

SUPPORTED_VERL_VERSION = "0.9.1"


def installed_version(distribution: str = "verl") -> str | None:
    """The installed version of ``distribution`` (verl by default), or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_verl_version() -> None:
    """Raise ImportError unless verl == :data:`SUPPORTED_VERL_VERSION` is installed."""
    found = installed_version()
    if found != SUPPORTED_VERL_VERSION:
        what = "is not installed" if found is None else f"is {found}"
        raise ImportError(
            f"dfpo supports verl=={SUPPORTED_VERL_VERSION} exactly, but verl {what}. "
            f"Install it with `pip install -r requirements.txt` (GPU) or `pip install -r requirements-cpu.txt` "
            f"(CPU tests), or `pip install 'verl[verl-core]=={SUPPORTED_VERL_VERSION}'`."
        )
