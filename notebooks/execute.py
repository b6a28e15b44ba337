"""Execute notebooks/tour.ipynb in place, with deterministic outputs (``make notebook``).

The tour is stored executed, so that a reader on a code host sees its tables
and figures. Its outputs depend only on the stored traces and on warmfit: no
timings, no kernel or Python versions, execution counts 1, 2, 3, ... The test
suite executes it again and compares (tests/test_notebook.py).

    python notebooks/execute.py            # rewrite the stored notebook
    python notebooks/execute.py --check    # exit 1 if the stored outputs are stale
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

NOTEBOOK = Path(__file__).resolve().parent / "tour.ipynb"


def execute(path: Path = NOTEBOOK) -> Any:
    """The notebook at ``path``, executed from its folder, with deterministic metadata."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(nb.metadata)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    nb.metadata = metadata  # no kernel, Python or language versions
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def text_of(nb: Any) -> list[list[str]]:
    """Per code cell, its outputs as text (images by their kind), for comparing runs."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown = []
        for out in cell.outputs:
            if "text" in out:
                shown.append(out["text"])
            for kind, value in sorted(out.get("data", {}).items()):
                shown.append(kind if kind.startswith("image/") else f"{kind}: {value}")
        cells.append(shown)
    return cells


def main(argv: list[str]) -> int:
    import nbformat

    fresh = execute()
    if "--check" in argv:
        stored = nbformat.read(NOTEBOOK, as_version=4)
        if text_of(stored) != text_of(fresh):
            print(f"{NOTEBOOK} is stale: run python notebooks/execute.py", file=sys.stderr)
            return 1
        return 0
    nbformat.write(fresh, NOTEBOOK)
    print(f"wrote {NOTEBOOK} ({NOTEBOOK.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
