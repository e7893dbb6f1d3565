"""Which package each built-in backend imports, and the command this project installs it with.

Data for ``mla-verify list``: the package names and commands are the ones scripts/install_kernels.sh, the
Makefile's ``triton-cpu`` target and docs/kernel-packages.md use.  Kernel wheels go in with ``--no-deps``:
each declares a torch that would replace the one here.  A backend added to ``backends.BUILTIN`` needs a row
(tests/test_list_cmd.py checks).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Packaging:
    imports: tuple      # ((module, distribution), ...): what the backend imports; the first that imports is used
    install: str        # the command that installs it


FLASH_MLA = "pip install --no-deps sgl-flash-mla==1.0.0  (a CUDA box: scripts/install_kernels.sh)"
FLASHINFER = "pip install --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.11"
SGLANG = "make triton-cpu  (triton 3.7.1, sglang 0.5.23 --no-deps and the few wheels its kernels import)"
FLAG_GEMS = "pip install --no-deps flag-gems==5.0.2"

PACKAGING = {
    "reference": Packaging((("reference", "mla-verify"),), "make setup  (part of this repository)"),
    "torch": Packaging((("torch", "torch"),), "make setup"),
    # sgl_kernel.flash_mla first, as the backend tries it (harness/backends/flashmla.py find_api)
    "flashmla": Packaging((("sgl_kernel.flash_mla", "sgl-kernel"), ("flash_mla", "sgl-flash-mla")), FLASH_MLA),
    "flashmla-sparse": Packaging((("flash_mla", "sgl-flash-mla"),), FLASH_MLA),
    "flashmla-sparse-prefill": Packaging((("flash_mla", "sgl-flash-mla"),), FLASH_MLA),
    "flaggems-sparse": Packaging((("flag_gems.fused", "flag-gems"),), FLAG_GEMS),
    "flashinfer-fa3": Packaging((("flashinfer", "flashinfer-python"),), FLASHINFER),
    "flashinfer-fa2": Packaging((("flashinfer", "flashinfer-python"),), FLASHINFER),
    "sglang-triton": Packaging((("sglang.kernels.ops.attention.decode_attention", "sglang"),), SGLANG),
    "sglang-verify-mla": Packaging((("sglang.kernels.ops.attention.verify_mla", "sglang"),), SGLANG),
    "flaggems": Packaging((("flag_gems.fused", "flag-gems"),), FLAG_GEMS),
}


@dataclass(frozen=True)
class PackageState:
    imports: bool
    text: str                   # the distribution and version, or why it does not import
    install: str | None = None  # set when it does not import


def package_state(name: str) -> PackageState | None:
    """Whether built-in backend ``name``'s package imports here (None: no row for it, e.g. a plug-in)."""
    from ..backends.optional import dist_version, try_import
    packaging = PACKAGING.get(name)
    if packaging is None:
        return None
    errors = []
    for module_name, dist in packaging.imports:
        module, error = try_import(module_name)
        if module is not None:
            return PackageState(True, f"{dist} {dist_version(dist) or '(version unknown)'}, imports {module_name}")
        errors.append(error)
    dists = " or ".join(dict.fromkeys(dist for _, dist in packaging.imports))
    return PackageState(False, f"{dists}: does not import here ({'; '.join(errors)})", packaging.install)
