"""Run one of FlashMLA's own test scripts (a ``__main__`` script, not a pytest file) as ``__main__``, with
``use_legacy=True`` added to every ``flash_mla_with_kvcache`` call: the sgl-flash-mla wheel has dense and
sparse decoding on its legacy (SM90) side only.  Nothing else of the test is changed.

Usage: python3 scripts/gpu/run_legacy.py .upstream/flashmla-tests/test_flash_mla_dense_decoding.py [args...]
(exit: the test's; 2 without a test script)
"""

import functools
import importlib
import runpy
import sys


def with_legacy(original):
    """``original`` with ``use_legacy=True`` unless the caller says otherwise."""
    @functools.wraps(original)
    def legacy(*args, **kwargs):
        kwargs.setdefault("use_legacy", True)
        return original(*args, **kwargs)
    return legacy


def main(argv: list[str]) -> None:
    if not argv:
        print("run_legacy.py: needs a test script (--help: usage)", file=sys.stderr)
        sys.exit(2)
    if argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return
    flash_mla = importlib.import_module("flash_mla")         # imported here: --help needs no kernel
    flash_mla.flash_mla_with_kvcache = with_legacy(flash_mla.flash_mla_with_kvcache)
    path = argv[0]
    sys.path.insert(0, path.rsplit("/", 1)[0])     # the test imports its neighbours (lib, ref, quant, kernelkit)
    sys.argv = argv
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
