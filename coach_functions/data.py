"""A model file's data, checked: what its load_data() returned, as float32 arrays, and the labels against the
model's classes. Pure (numpy, imported when called)."""

from __future__ import annotations

from coach_functions.failures import EpochError


def normalise_data(data) -> dict:
    """Accept `(X, y)`, `(X, y, X_val, y_val)` or a dict with those keys; return float32 arrays, checked.

    Rejected (EpochError): another shape of result, inputs or labels that are not numeric arrays, empty training
    data, inputs and labels of different lengths, NaN or infinity anywhere, and validation samples (or labels) of
    another shape than the training ones. Labels are checked against the model's classes later, in the epoch,
    where the model's output size is known (`check_labels`)."""
    x_train, y_train, x_val, y_val = _parts(data)
    if x_train is None or y_train is None or _length(x_train) != _length(y_train) or _length(x_train) == 0:
        raise EpochError("load_data(): training inputs and labels must be non-empty and of equal length")
    if (x_val is None) != (y_val is None) or (x_val is not None and _length(x_val) != _length(y_val)):
        raise EpochError("load_data(): validation inputs and labels must both be given, of equal length")
    names = ("X_train", "y_train") + (("X_val", "y_val") if x_val is not None and _length(x_val) > 0 else ())
    out = {name: _float_array(name, value) for name, value in zip(names, (x_train, y_train, x_val, y_val))}
    for inputs, labels in (("X_val", "X_train"), ("y_val", "y_train")):
        if inputs in out and out[inputs].shape[1:] != out[labels].shape[1:]:
            raise EpochError(f"load_data(): {inputs} samples have shape {out[inputs].shape[1:]}, {labels} samples "
                             f"{out[labels].shape[1:]}")
    return out


def _parts(data) -> list:
    """[X_train, y_train, X_val, y_val] from `(X, y)`, `(X, y, X_val, y_val)` or a dict (None: not given)."""
    if isinstance(data, dict):
        return [data.get(k) for k in ("X_train", "y_train", "X_val", "y_val")]
    if isinstance(data, (tuple, list)) and len(data) in (2, 4):
        return list(data) + [None] * (4 - len(data))
    raise EpochError("load_data() must return (X, y), (X, y, X_val, y_val) or a dict of them")


def _float_array(name: str, value):
    """`value` as a float32 array of one value (or row) per sample, every value finite; a column of labels as a
    vector."""
    import numpy as np

    try:
        array = np.asarray(value, dtype="float32")
    except (TypeError, ValueError) as error:
        raise EpochError(f"load_data(): {name} is not a numeric array ({error})") from None
    if array.ndim == 0:
        raise EpochError(f"load_data(): {name} is a single number, not one value per sample")
    if array.ndim == 2 and array.shape[1] == 1 and name.startswith("y"):
        array = array.reshape(-1)  # one label per row, as a column
    finite = np.isfinite(array)
    if not finite.all():
        where = np.unravel_index(int(np.argmin(finite)), array.shape)
        raise EpochError(f"load_data(): {name} holds NaN or infinity (first at sample {where[0]}: "
                         f"{array[where]})")
    return array


def _length(value) -> int | None:
    try:
        return len(value)
    except TypeError:  # a number, or something else without a length
        return None


def check_labels(data: dict, classes: int | None, model_path: str) -> None:
    """Labels must be class indices 0..classes-1 of the model's output (`classes` from the shape pass; None when
    the model's loss is not a softmax over sparse labels, and then labels are the loss's business)."""
    import numpy as np

    if classes is None:
        return
    for name in ("y_train", "y_val"):
        labels = data.get(name)
        if labels is None:
            continue
        if labels.ndim != 1:
            raise EpochError(f"model file {model_path}: {name} must hold one class index per sample, it has shape "
                             f"{labels.shape}")
        bad = (labels < 0) | (labels >= classes) | (labels != np.floor(labels))
        if bad.any():
            first = int(np.argmax(bad))
            raise EpochError(f"model file {model_path}: {name}[{first}] is {labels[first]:g}, not a class index of "
                             f"the model's {classes} outputs (0..{classes - 1}); {int(bad.sum())} such labels")
