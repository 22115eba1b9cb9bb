"""`gpuwise fit`'s cheapest change that fits (issue 21, item 13), found by memory alone: a smaller format on the same
GPUs before more GPUs, the most faithful such format, the fewest GPUs; each checked by `fit` itself."""

from __future__ import annotations

import gpuwise
from gpuwise.catalog.models import load_model
from gpuwise.plan.fit_fix import fit_fix
from gpuwise.plan.runnable import _formats


def test_a_smaller_format_on_the_same_gpus_comes_first_and_is_the_most_faithful_that_fits():
    r = gpuwise.fit("llama-3.1-70b", gpu="rtx-4090", engine="llamacpp", weights="Q4_K_M")
    fix = fit_fix(r)
    assert fix is not None and fix.name == "weights" and not fix.changes_job
    assert gpuwise.fit("llama-3.1-70b", gpu="rtx-4090", engine="llamacpp", weights=fix.options["weights"]).fits
    spec = load_model("llama-3.1-70b").spec
    ladder = [f for f in _formats(r.request.model, "llamacpp") if f.weight_bytes(spec) < r.weights.weight_bytes(spec)]
    names = [f.name for f in ladder]
    for more_faithful in names[: names.index(fix.options["weights"])]:
        assert not gpuwise.fit("llama-3.1-70b", gpu="rtx-4090", engine="llamacpp", weights=more_faithful).fits


def test_then_the_fewest_gpus_of_the_same_kind():
    r = gpuwise.fit("llama-3.1-70b", gpu="rtx-4090", weights="awq")
    fix = fit_fix(r)
    assert fix is not None and fix.name == "more-gpus" and "weights" not in fix.options
    n = fix.options["num_gpus"]
    assert gpuwise.fit("llama-3.1-70b", gpu="rtx-4090", weights="awq", num_gpus=n).fits
    fewer = [k for k in (2, 4, 8) if k < n]  # the tensor-parallel degrees vLLM takes for 64 heads / 8 KV heads
    assert fewer and not any(gpuwise.fit("llama-3.1-70b", gpu="rtx-4090", weights="awq", num_gpus=k).fits
                             for k in fewer)


def test_nothing_to_fix_when_it_fits():
    assert fit_fix(gpuwise.fit("llama-3.1-8b", gpu="h100")) is None
