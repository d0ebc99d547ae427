"""ResNet-18 of jobs/models/resnet18.py on a quarter of its data: 1,000 digits train, 250 validate.

Why: benchmarks/fit_accuracy.py runs 34 full epochs at 10 (w, s) points; on the full 4,000 digits that is
over 40 minutes on this 2-core machine (about 75 s per epoch at (1,1) on 2026-11-23), too long to hold the
shared measurement lock. The network, its 11 M parameters and the traffic per mini-batch are the same, so each
batch costs what it costs in the full job; only the number of batches per epoch is a quarter.
"""

import importlib.util
from pathlib import Path

TRAIN_SAMPLES = 1000
VAL_SAMPLES = 250
_FULL = Path(__file__).resolve().parents[2] / "jobs" / "models" / "resnet18.py"


def _full():
    spec = importlib.util.spec_from_file_location("resnet18_full", _FULL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model():
    return _full().build_model()


def load_data():
    x_train, y_train, x_val, y_val = _full().load_data()
    return x_train[:TRAIN_SAMPLES], y_train[:TRAIN_SAMPLES], x_val[:VAL_SAMPLES], y_val[:VAL_SAMPLES]
