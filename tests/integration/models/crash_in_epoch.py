"""A model whose forward pass always raises: every attempt of every epoch fails inside the worker."""

import numpy as np
from mxnet import gluon


class Exploding(gluon.nn.Block):
    def forward(self, x):
        raise RuntimeError("the model exploded")


def build_model():
    return Exploding()


def load_data():
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    return x, np.zeros(64, dtype="float32")
