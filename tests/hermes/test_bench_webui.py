"""``scripts/bench_hermes.py --webui``: the WebUI's own check in its own process, before and after.

On a WebUI-shaped checkout of either shape (the real WebUI's run is in
docs/benchmarks.md): both rows are printed, the second after the docs' lines really
accelerated the module, and the checkout is left as it was. Figures are never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.hermes.webui_shapes import SHAPES, make_webui

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_hermes.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=240, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_bench_webui_measures_the_webuis_check_without_and_with_the_docs_lines(
    tmp_path: Path, shape: str
) -> None:
    webui = make_webui(tmp_path / "hermes-webui", shape)
    before = {p: p.read_bytes() for p in webui.rglob("*") if p.is_file()}
    done = bench("--webui", str(webui), "--python", sys.executable, "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    header = next(n for n, line in enumerate(lines) if "in its own process (per call)" in line)
    assert "api/agent_runtime.py" in lines[header]
    assert lines[header + 2].lstrip().startswith("upstream: 3 git subprocesses")
    assert lines[header + 3].lstrip().startswith("with the docs' two lines") and "faster" in lines[header + 3]
    assert {p: p.read_bytes() for p in webui.rglob("*") if p.is_file()} == before  # only read


def test_bench_webui_refuses_what_is_not_a_webui(tmp_path: Path) -> None:
    done = bench("--webui", str(tmp_path), "--quick")
    assert done.returncode == 2
    assert "not a Hermes WebUI checkout" in done.stderr
