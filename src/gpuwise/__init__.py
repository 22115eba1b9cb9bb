"""gpuwise: will it fit, how fast, on what. GPU memory, speed and layout answers for LLM work.

The analytical core imports no torch; `gpuwise.measure` is the optional part that does.
"""

from __future__ import annotations

# The subpackage gpuwise.plan first: importing it later would rebind the name `plan` to the package, hiding the
# function gpuwise.plan() (Python sets a package's attribute when its subpackage is first imported).
from . import plan as _plan_package  # noqa: F401
from .api import doctor, fit, infer, pick, plan, roofline, train
from .catalog.gpus import get_gpu, search_gpus
from .catalog.models import load_model, search_models
from .errors import GpuwiseError
from .model.params import param_counts, tensor_inventory
from .quant.formats import get_weight_format
from .version import __version__

__all__ = [
    "doctor", "pick", "plan",
    "GpuwiseError", "__version__", "fit", "get_gpu", "infer", "roofline", "get_weight_format", "load_model", "param_counts",
    "search_gpus", "search_models", "tensor_inventory", "train",
]
