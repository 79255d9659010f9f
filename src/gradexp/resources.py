"""Where gradexp's own files are: conf/ and experiments/, inside the installed package (a wheel
ships them) or at the top of a checkout."""

from __future__ import annotations

from pathlib import Path


def resource_dir(name: str) -> Path:
    """conf/ or experiments/: inside the installed package (wheel), else at the checkout's top."""
    package_dir = Path(__file__).resolve().parent
    inside = package_dir / name
    return inside if inside.is_dir() else package_dir.parents[1] / name
