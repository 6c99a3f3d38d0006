"""costmodel.progress: bars only on request or on a terminal, never on stdout."""

from __future__ import annotations

import io
import json
import os

from costmodel import progress as pg


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_off_unless_a_terminal_or_asked(monkeypatch):
    items = list(range(5000))
    monkeypatch.delenv("COSTMODEL_PROGRESS", raising=False)
    monkeypatch.setattr(pg.sys, "stderr", io.StringIO())  # not a terminal
    assert pg.progress(items, desc="x") is items
    monkeypatch.setattr(pg.sys, "stderr", _Tty())
    bar = pg.progress(items, desc="x")
    assert bar is not items and list(bar) == items  # a delayed bar: shown after DELAY_S only
    monkeypatch.setenv("COSTMODEL_PROGRESS", "0")
    assert pg.progress(items, desc="x") is items
    monkeypatch.delenv("COSTMODEL_PROGRESS")
    short = items[:10]
    assert pg.progress(short, desc="x") is short  # short: never a bar


def test_forced_on_writes_to_stderr_only(monkeypatch, tmp_path, capsys):
    """COSTMODEL_PROGRESS=1 on a system much larger than the program (idle ranks): the
    bars go to stderr, the outputs are unchanged."""
    from costmodel import driver
    from costmodel.systems import load_system

    doc = load_system("dgx-h100").to_json()
    doc["name"] = "big"
    doc["network"][0]["npus_count"] = 4096
    (tmp_path / "big.json").write_text(json.dumps(doc))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("COSTMODEL_PROGRESS", "1")
    gen = os.path.join(root, "examples", "resnet50_train_4dev.mlir")
    rc = driver.main([gen, "--annotate-cost=hardware=h100-sxm",
                      f"--extract-collectives=system={tmp_path / 'big.json'} chakra-dir={tmp_path / 't'} simulate=true",
                      "-o", str(tmp_path / "o.mlir")])
    cap = capsys.readouterr()
    assert rc == 0 and "simulate: step time" in cap.err
    assert "rank graphs" in cap.err and "chakra: encoding" in cap.err and "%|" in cap.err
    assert "%|" not in cap.out
    assert len(os.listdir(tmp_path / "t")) == 4096 + 5
