"""A model file whose load_data() raises: the job must fail with a clear reason, not hang."""


def build_model():
    from mxnet import gluon

    return gluon.nn.Dense(10)


def load_data():
    raise RuntimeError("the data set is not where it should be")
