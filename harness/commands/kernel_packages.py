"""Whether a built-in backend's package imports here, and the command that installs it.

For ``mla-verify list``.  Each backend class declares what it imports (``packages``: module and
distribution pairs) and the command that installs it (``install``; harness/backends/base.py), as
scripts/install_kernels.sh, the Makefile's ``triton-cpu`` target and docs/kernel-packages.md do.  Kernel wheels go
in with ``--no-deps``: each declares a torch that would replace the one here.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class PackageState:
    imports: bool
    text: str                   # the distribution and version, or why it does not import
    install: str | None = None  # set when it does not import


def package_state(backend) -> PackageState | None:
    """Whether the package ``backend`` declares imports here (None: it declares none)."""
    from ..backends.optional import dist_version, try_import
    if not backend.packages:
        return None
    errors = []
    for module_name, dist in backend.packages:
        module, error = try_import(module_name)
        if module is not None:
            return PackageState(True, f"{dist} {dist_version(dist) or '(version unknown)'}, imports {module_name}")
        errors.append(error)
    dists = " or ".join(dict.fromkeys(dist for _, dist in backend.packages))
    return PackageState(False, f"{dists}: does not import here ({'; '.join(errors)})", backend.install)
