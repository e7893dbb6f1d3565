"""Bench rows as a console table and as CSV; both read only the rows."""

import csv
import math

from ..errors import InputError

COLUMNS = [   # (header, width, cell)
    ("case", 34, lambda r, b: r["case_id"]),
    ("backend", 16, lambda r, b: r.get("backend") or r.get("backend_spec")),
    ("status", 11, lambda r, b: r["status"]),
    ("kernel us p50 [p10-p90]", 26, lambda r, b: _spread(b.get("kernel_us"))),
    ("e2e us p50", 11, lambda r, b: _us((b.get("e2e_us") or {}).get("p50"))),
    ("e2e mode", 9, lambda r, b: _mode(b)),
    ("GB/s", 8, lambda r, b: _num(b.get("bytes_per_s"), 1e9)),
    ("TFLOP/s", 8, lambda r, b: _num(b.get("flop_per_s"), 1e12)),
    ("FLOP/B", 7, lambda r, b: _num(b.get("intensity"), 1)),
    ("bound", 7, lambda r, b: b.get("bound") or ""),
    ("% ceil", 6, lambda r, b: _num(b.get("pct_of_ceiling"), 1)),
]


def _num(v, unit) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    x = v / unit
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _us(v) -> str:
    return "" if v is None else f"{v:.1f}" if v < 1e4 else f"{v:.0f}"


def _spread(k) -> str:
    if not k:
        return ""
    flag = " wide" if k.get("wide") else ""
    return f"{_us(k['p50'])} [{_us(k['p10'])}-{_us(k['p90'])}]{flag}"


def _mode(b) -> str:
    mode = b.get("e2e_mode") or ""
    return "graph" if mode.startswith("cuda-graph") else mode


def header() -> str:
    return "  ".join(f"{h:<{w}}" for h, w, _ in COLUMNS).rstrip()


def line(row: dict) -> str:
    b = row.get("bench") or {}
    cells = [str(cell(row, b) or "") for _, _, cell in COLUMNS]
    text = "  ".join(f"{c:<{w}}" for c, (_, w, _) in zip(cells, COLUMNS)).rstrip()
    if not b.get("timed"):
        text += f"  -- {b.get('why') or row.get('reason') or 'not timed'}"[:220]
    return text


def cross_check_line(row: dict) -> str | None:
    b = row.get("bench") or {}
    c = b.get("cross_check")
    if not c:
        return None
    if "error" in c:
        return f"cross-check {row['case_id']} {row.get('backend')}: could not run: {c['error']}"
    verdict = "agrees" if c["agrees"] else "DISAGREES"
    flush = f" ({c['harness_flush']} flush)" if c.get("harness_flush") else ""
    line = (f"cross-check {row['case_id']} {row.get('backend')}: harness kineto p50 {c['harness_p50_us']:.1f} us"
            f"{flush}, {c['method']} {c['independent_us']:.1f} us, ratio {c['ratio']:.3f}: {verdict} "
            f"(within +-{100 * c['tolerance']:.0f}%)")
    for other in b.get("cross_check_others") or []:
        if other.get("independent_us"):
            line += f"; beside it, {other['method']} {other['independent_us']:.1f} us (ratio {other['ratio']:.3f})"
    return line


def describe_ceilings(c) -> str:
    ridge = c.matmul_flop_per_s / c.copy_bytes_per_s
    where = "measured now" if c.source == "measured" else f"cached {c.source}, measured {c.measured_at}"
    return (f"ceilings on {c.device_name}: copy {c.copy_bytes_per_s / 1e9:.1f} GB/s, bf16 matmul "
            f"{c.matmul_flop_per_s / 1e12:.2f} TFLOP/s, ridge {ridge:.1f} FLOP/B ({where})")


CSV_FIELDS = ["case_id", "backend", "backend_spec", "status", "reason", "mode", "dtype", "batch_size", "heads",
              "kv_heads", "s_q", "seqlen_mean", "timed", "gpu_numbers", "kernel_scope", "kernel_us_p10",
              "kernel_us_p50", "kernel_us_p90", "kernel_spread", "kernel_spread_wide", "e2e_mode", "e2e_us_p10",
              "e2e_us_p50", "e2e_us_p90", "flops", "bytes", "intensity", "bytes_per_s", "flop_per_s", "ridge",
              "bound", "pct_bandwidth", "pct_matmul", "pct_of_ceiling", "copy_bytes_per_s", "matmul_flop_per_s",
              "device_name", "cross_check_independent_us", "cross_check_ratio", "cross_check_agrees"]


def csv_record(row: dict) -> dict:
    b = row.get("bench") or {}
    k, e = b.get("kernel_us") or {}, b.get("e2e_us") or {}
    c, x = b.get("ceilings") or {}, b.get("cross_check") or {}
    rec = {f: row.get(f) for f in ("case_id", "backend", "backend_spec", "status", "reason", "mode", "dtype",
                                   "batch_size", "heads", "kv_heads", "s_q")}
    rec.update({f: b.get(f) for f in ("seqlen_mean", "timed", "gpu_numbers", "kernel_scope", "e2e_mode", "flops",
                                      "bytes", "intensity", "bytes_per_s", "flop_per_s", "ridge", "bound",
                                      "pct_bandwidth", "pct_matmul", "pct_of_ceiling")})
    rec.update({"kernel_us_p10": k.get("p10"), "kernel_us_p50": k.get("p50"), "kernel_us_p90": k.get("p90"),
                "kernel_spread": k.get("spread"), "kernel_spread_wide": k.get("wide"),
                "e2e_us_p10": e.get("p10"), "e2e_us_p50": e.get("p50"), "e2e_us_p90": e.get("p90"),
                "copy_bytes_per_s": c.get("copy_bytes_per_s"), "matmul_flop_per_s": c.get("matmul_flop_per_s"),
                "device_name": c.get("device_name"), "cross_check_independent_us": x.get("independent_us"),
                "cross_check_ratio": x.get("ratio"), "cross_check_agrees": x.get("agrees")})
    return rec


def write_csv(rows: list[dict], path: str):
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            w.writeheader()
            for r in rows:
                w.writerow(csv_record(r))
    except OSError as e:
        raise InputError(f"cannot write CSV file {path}: {e.strerror or e}") from None
