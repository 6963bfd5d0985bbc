"""No Ascend board is here: the simulator is the only device."""

from pathlib import Path


def is_hardware_available() -> bool:
    """Whether an Ascend NPU is attached: never, here."""
    return False


def get_simpler_root() -> Path:
    """PyPTO's runtime submodule: none here (pypto_async is the runtime)."""
    return Path(__file__).resolve().parent
