"""What a result was measured on: recorded once per run, in every row."""

import importlib.metadata
import os
import platform
import subprocess
import tomllib
from functools import lru_cache
from pathlib import Path

import torch


@lru_cache(maxsize=1)
def describe() -> dict:
    env = {
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": None,
        "driver": None,
        # MLA_VERIFY_COMMIT first: a copied tree (a GPU box) may carry a stale .git of its own
        "commit": os.environ.get("MLA_VERIFY_COMMIT") or _git_commit(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["driver"] = _driver_version()
    return env


@lru_cache(maxsize=1)
def mla_verify_version() -> str:
    """The installed package's version; from a checkout that is not installed, pyproject.toml's."""
    try:
        return importlib.metadata.version("mla-verify")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _git_commit():
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (out.stdout.strip() + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
