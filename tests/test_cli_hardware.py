import json

import pytest

from costmodel.cli import main


def test_hardware_list(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("a100-40gb", "b200", "tpu-v5p", "cpu"):
        assert name in out


def test_hardware_show_name_and_path(capsys, tmp_path):
    assert main(["hardware", "show", "h200"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memory_bandwidth_GBps"]["value"] == 4800
    assert "datasheet" in data["memory_bandwidth_GBps"]["source"]
    p = tmp_path / "x.json"
    p.write_text(json.dumps(data))
    assert main(["hardware", "show", str(p)]) == 0


def test_hardware_show_errors(capsys, tmp_path):
    assert main(["hardware", "show", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown hardware 'nope'" in err
    p = tmp_path / "bad.json"
    p.write_text('{"name": "x"}')
    assert main(["hardware", "show", str(p)]) == 1
    assert "missing key" in capsys.readouterr().err


def test_systems_list_and_show(capsys):
    assert main(["systems", "list"]) == 0
    out = capsys.readouterr().out
    assert "dgx-h100-x4nodes" in out and "tpu-v5p-64" in out
    assert main(["systems", "show", "dgx-h100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"] == "h100-sxm"
    assert main(["systems", "show", "dgx-h100", "--astra-sim"]) == 0
    assert "npus_count: [ 8 ]" in capsys.readouterr().out
    assert main(["systems", "show", "nope"]) == 1
    assert "unknown system 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, usage, error", [
    (["predict", "model.mlir", "--sytem", "dgx-h100"], "costmodel predict",
     "unrecognized arguments: --sytem dgx-h100 (--sytem: did you mean --system?)"),
    (["chakra", "check", "trace.chakra", "--jsn"], "costmodel chakra check",  # a nested subcommand
     "unrecognized arguments: --jsn (--jsn: did you mean --json?)"),
])
def test_a_mistyped_option_shows_the_subcommands_usage_and_the_closest_option(capsys, argv, usage, error):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {usage} ")
    assert f"{usage}: error: {error}" in err
