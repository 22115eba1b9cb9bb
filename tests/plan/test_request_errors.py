"""Issue 21, item 16: a request no GPU or layout can take is the request's error, said as such in one line (exit 2),
not hidden behind "nothing passes the rules" or blamed on the batch size; a model too large in the engine's most
faithful format is costed in its smallest, so the rejection gives the least it needs."""

from __future__ import annotations

import pytest

from gpuwise.api import pick
from gpuwise.cli import main


def _refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuwise: error:")
    return err


PLAN = ["plan", "llama-3.1-70b", "--gpu", "h100-sxm", "--num-gpus", "16", "--seq", "4096", "--global-batch", "64"]


@pytest.mark.parametrize("fixed, said", [
    (["--pp", "7"], "does not divide --num-gpus 16"),
    (["--pp", "160"], "deeper than the model's 80 layers"),
    (["--tp", "3"], "--tp 3 does not divide the number of attention heads"),
    (["--ep", "2"], "mixture-of-experts"),
    (["--cp", "3"], "does not divide --num-gpus 16"),
])
def test_plan_with_an_impossible_degree_names_the_degree_not_the_batch(capsys, fixed, said):
    err = _refused(capsys, PLAN + fixed)
    assert said in err and "batch" not in err


def test_plan_with_a_possible_degree_still_plans(capsys):
    assert main(PLAN + ["--pp", "4"]) == 0
    assert "PP 4" in capsys.readouterr().out


def test_pick_says_an_input_no_gpu_can_take(capsys):
    err = _refused(capsys, ["pick", "llama-3.1-70b", "--gpus", "h100-sxm,rtx-3090", "--prompt-tokens", "99999999"])
    assert "absurdly large" in err


def test_pick_costs_the_smallest_format_when_none_fits():
    r = pick("llama-3.1-70b", gpus=["rtx-3090"], max_gpus=2)
    assert not r.ranked and len(r.rejected) == 2
    two = next(c for c in r.rejected if c.count == 2)
    assert two.rule == "memory" and "awq" in two.reason and "gpu_memory_utilization" in two.reason
    assert two.memory_bytes < 24 * 2**30  # 4-bit weights split over two cards, not 16-bit (69 GiB per GPU)
