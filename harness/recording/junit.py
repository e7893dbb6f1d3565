"""JUnit XML: one ``testcase`` per case and backend, for CI systems (Jenkins, GitLab, GitHub).

``fail`` is a ``failure``; a raise, crash, timeout or harness error is an
``error``; ``unsupported`` is ``skipped`` with its reason.  Messages are the
rows' one-line failure messages.
"""

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from ..errors import InputError
from .results import failure_lines
from .status import Status


def to_xml(rows: list[dict], name: str = "mla-verify") -> ET.ElementTree:
    by_backend = defaultdict(list)
    for row in rows:
        by_backend[row.get("backend") or "?"].append(row)
    root = ET.Element("testsuites", name=name)
    for backend, group in by_backend.items():
        suite = ET.SubElement(root, "testsuite", name=f"{name}[{backend}]", tests=str(len(group)))
        tallies = {"failures": 0, "errors": 0, "skipped": 0}
        time_total = 0.0
        for row in group:
            seconds = row.get("wall_s") if isinstance(row.get("wall_s"), (int, float)) else 0.0
            time_total += seconds
            case = ET.SubElement(suite, "testcase", classname=f"{backend}.{row.get('suite', '?')}",
                                 name=row["case_id"], time=f"{seconds:.4f}")
            status = row["status"]
            if status == Status.PASS.value:
                continue
            if status == Status.UNSUPPORTED.value:
                tag, tally = "skipped", "skipped"
            elif status == Status.FAIL.value:
                tag, tally = "failure", "failures"
            else:
                tag, tally = "error", "errors"
            tallies[tally] += 1
            message = str(row.get("reason")) if tag == "skipped" else failure_lines(row)[0]
            detail = ET.SubElement(case, tag, message=message, type=status)
            detail.text = "\n".join([*(row.get("messages") or []), *([row["message"]] if row.get("message") else []),
                                     *(row.get("traceback") or []),
                                     f"rerun: {row.get('rerun', '')}"])
        suite.set("time", f"{time_total:.3f}")
        for key, value in tallies.items():
            suite.set(key, str(value))
    return ET.ElementTree(root)


def write(path: str | Path, rows: list[dict], name: str = "mla-verify") -> Path:
    path = Path(path)
    tree = to_xml(rows, name)
    ET.indent(tree)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tree.write(path, encoding="utf-8", xml_declaration=True)
    except OSError as e:
        raise InputError(f"--junit-xml {path}: cannot write: {e.strerror or e}") from None
    return path
